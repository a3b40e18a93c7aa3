"""spec.engine at the real API server: each engine/feature combination shardwise cannot run in this
version is refused with the sentence the pydantic models give offline (api/engines.py), each
engine's extraArgs are checked against that engine's own flags, and a runnable spec per engine is
accepted with its defaults. The CEL rules' cost must also fit the API server's budget, which only a
real server checks."""

from __future__ import annotations

import json

import pytest
import yaml

from shardwise.api import engines
from tests.e2e.support import Kubectl
from tests.e2e.test_validation import with_spec

pytestmark = pytest.mark.e2e

ADAPTER = [{"name": "a", "source": {"repo": "o/a"}}]
REFUSED = [
    ("sglang adapters", with_spec(engine="sglang", adapters=ADAPTER, lora={}), engines.LORA_MESSAGE),
    ("trtllm lora", with_spec(engine="trtllm", lora={}), engines.LORA_MESSAGE),
    ("sglang disaggregation", with_spec(engine="sglang", disaggregation={"mode": "Disaggregated"}),
     engines.DISAGGREGATION_MESSAGE),
    ("trtllm disaggregation", with_spec(engine="trtllm", disaggregation={"mode": "Disaggregated"}),
     engines.DISAGGREGATION_MESSAGE),
    ("vllm flags on trtllm", with_spec(engine="trtllm", serving__extraArgs=["--enforce-eager"]),
     engines.EXTRA_ARGS_MESSAGE),
    ("sglang flags on vllm", with_spec(serving__sglangExtraArgs=["--enable-torch-compile"]),
     engines.SGLANG_ARGS_MESSAGE),
    ("trtllm flags on sglang", with_spec(engine="sglang", serving__trtllmExtraArgs=["--trust_remote_code"]),
     engines.TRTLLM_ARGS_MESSAGE),
    ("owned sglang flag", with_spec(engine="sglang", serving__sglangExtraArgs=["--tp-si", "4"]),
     engines.SGLANG.owned_message),
    ("unknown sglang flag", with_spec(engine="sglang", serving__sglangExtraArgs=["--tp_size=4"]),
     "serving.sglangExtraArgs item '--tp_size=4' is not a flag of `python -m sglang.launch_server`"),
    ("owned trtllm flag", with_spec(engine="trtllm", serving__trtllmExtraArgs=["--kv_cache_free_gpu_memory_fraction=0.5"]),
     engines.TRTLLM.owned_message),
    ("trtllm flag spelt with dashes", with_spec(engine="trtllm", serving__trtllmExtraArgs=["--trust-remote-code"]),
     "serving.trtllmExtraArgs item '--trust-remote-code' is not a flag of `trtllm-serve`"),
    ("unknown engine", with_spec(engine="tgi"), "spec.engine"),
]


@pytest.mark.parametrize("case,doc,message", REFUSED, ids=[c[0] for c in REFUSED])
def test_what_an_engine_cannot_run_is_refused(kubectl: Kubectl, case: str, doc: dict, message: str) -> None:
    result = kubectl.run("create", "-f", "-", input=yaml.safe_dump(doc), check=False)
    assert result.returncode != 0, f"{case}: the API server accepted it"
    assert message in result.stderr, f"{case}: {result.stderr.strip()}"


@pytest.mark.parametrize("engine,field,args", [
    ("sglang", "sglangExtraArgs", ["--chunked-prefill-size", "4096", "--enable-torch-compile"]),
    ("trtllm", "trtllmExtraArgs", ["--trust_remote_code", "--max_beam_width=1"]),
])
def test_each_engine_accepts_its_own_flags(kubectl: Kubectl, engine: str, field: str, args: list[str]) -> None:
    doc = with_spec(engine=engine, **{f"serving__{field}": args})
    kubectl.run("create", "-f", "-", input=yaml.safe_dump(doc))
    got = json.loads(kubectl.run("get", "infd", doc["metadata"]["name"], "-o", "json").stdout)["spec"]
    assert got["engine"] == engine and got["serving"][field] == args


def test_the_engine_defaults_to_vllm(kubectl: Kubectl) -> None:
    doc = with_spec()
    kubectl.run("create", "-f", "-", input=yaml.safe_dump(doc))
    got = json.loads(kubectl.run("get", "infd", doc["metadata"]["name"], "-o", "json").stdout)["spec"]
    assert got["engine"] == "vllm"
