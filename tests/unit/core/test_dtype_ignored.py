"""bf16 asked of an FP8 or MXFP4 checkpoint: the status says so (DtypeIgnored, with the planner's
sentence), announced once as a Warning, and clears when the spec asks for what is loaded."""

from shardwise import planner
from shardwise.decide import progress, transitions
from shardwise.render.children import Owner

from tests.unit.core.test_progress import deployment, spec
from tests.unit.planner.planner_builders import h100_node
from tests.unit.planner.planner_builders import spec as plan_spec

NODES = planner.inventory_from_nodes([h100_node("a"), h100_node("b")])


def _plan(dtype: str | None) -> dict:
    fields = {"dtype": dtype} if dtype else {}
    request = planner.request_from_spec(plan_spec("deepseek-ai/DeepSeek-V3", model_fields=fields))
    return planner.plan(request, NODES).to_dict()


def status_of(plan: dict, before: dict | None = None) -> dict:
    return progress.build_status(spec(), plan, deployment(1, 1), [], before or {}, owner=Owner("m", "ns", "u"),
                                 generation=2, now="t")


def ignored(status: dict) -> dict:
    return next(c for c in status["conditions"] if c["type"] == "DtypeIgnored")


def test_bf16_of_an_fp8_checkpoint_is_on_the_status_and_announced_once() -> None:
    before = status_of(_plan(None))
    assert (ignored(before)["status"], ignored(before)["reason"]) == ("False", "AsExpected")
    after = status_of(_plan("bfloat16"), before)
    cond = ignored(after)
    assert (cond["status"], cond["reason"]) == ("True", "CheckpointStoredQuantized")
    assert "spec.model.dtype bfloat16" in cond["message"] and "stored as fp8" in cond["message"]
    assert after["plan"]["weights"]["format"] == "fp8"
    announced = [(t, r) for t, r, _ in transitions.transitions(before, after)]
    assert ("Warning", "CheckpointStoredQuantized") in announced
    assert transitions.transitions(after, status_of(_plan("bfloat16"), after)) == []
