"""LoRA on the simulated engine against the real vLLM 0.32 captures (tests/fixtures/.../lora/).

Each answer is compared with its capture to the character where the capture fixes it, and is read
by the operator's own parsers (shardwise.decide.adapters), which must see the simulator's answers
exactly as they see the real engine's.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import pathlib
import re
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from shardwise.decide import adapters as operator_adapters
from shardwise_runtime.sim import adapterfiles, hub_thread, lora, pods, server
from shardwise_runtime.sim.config import EngineConfig, LoraConfig, LoraModule, parse_lora_modules
from shardwise_runtime.sim.engine import Engine, Plan
from sim_support import CAPTURES, TINY, serving, shape

pytestmark = pytest.mark.anyio

LORA = CAPTURES / "lora"
_SCRIPT = pathlib.Path(__file__).resolve().parents[3] / "hack" / "make-tiny-lora.py"


def _make_tiny_lora() -> Any:
    spec = importlib.util.spec_from_file_location("make_tiny_lora", _SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


make_tiny_lora = _make_tiny_lora()


def captured(name: str) -> tuple[str, int]:
    """The body text and HTTP code of one lora/*.txt answer."""
    body, status = (LORA / name).read_text(encoding="utf-8").strip().rsplit("\n", 1)
    return body, int(status.removeprefix("HTTP "))


@dataclasses.dataclass(frozen=True)
class Adapters:
    a1: str
    a2: str
    rank16: str
    no_weights: str


@pytest.fixture
def adapters(tmp_path: pathlib.Path) -> Adapters:
    """Adapters as the capture's set-up had them: rank 8 on q_proj/v_proj, plus a rank-16 one."""
    found = Adapters(*(str(tmp_path / n) for n in ("a1", "a2", "rank16", "no-weights")))
    make_tiny_lora.write_adapter(pathlib.Path(found.a1), rank=8, seed=1)
    make_tiny_lora.write_adapter(pathlib.Path(found.a2), rank=8, seed=2)
    make_tiny_lora.write_adapter(pathlib.Path(found.rank16), rank=16, seed=3)
    make_tiny_lora.write_adapter(pathlib.Path(found.no_weights), rank=8)
    (pathlib.Path(found.no_weights) / "adapter_model.safetensors").unlink()
    return found


def captured_config(a1: str, **lora_changes: Any) -> EngineConfig:
    """The captured server: --max-model-len 512 --enable-lora --max-lora-rank 8 --max-loras 2
    --lora-modules a1=ADAPTER_DIR, with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True."""
    settings = LoraConfig(max_rank=8, max_loras=2, modules=(LoraModule("a1", a1),))
    return dataclasses.replace(
        TINY,
        max_model_len=512,
        lora=dataclasses.replace(settings, **lora_changes),
        runtime_lora_updating=True,
    )


@pytest.fixture
async def http(adapters: Adapters) -> AsyncIterator[httpx.AsyncClient]:
    async with serving(captured_config(adapters.a1)) as served:
        async with httpx.AsyncClient(base_url=served.url) as client:
            yield client


async def _load(http: httpx.AsyncClient, name: str, path: str, **extra: Any) -> httpx.Response:
    return await http.post(
        "/v1/load_lora_adapter", json={"lora_name": name, "lora_path": path, **extra}
    )


# -- /v1/models ------------------------------------------------------------------------------


async def test_models_lists_adapters_shaped_like_the_capture(
    http: httpx.AsyncClient, adapters: Adapters
) -> None:
    loaded = await _load(http, "a2", adapters.a2)
    assert (loaded.status_code, loaded.text) == (
        200,
        "Success: LoRA adapter 'a2' added successfully.",
    )
    ours = (await http.get("/v1/models")).json()
    theirs = json.loads((LORA / "models-with-adapters.json").read_text())
    assert shape(ours) == shape(theirs)
    assert [(m["id"], m["parent"], m["max_model_len"]) for m in ours["data"]] == [
        (m["id"], m["parent"], m["max_model_len"]) for m in theirs["data"]
    ]
    assert [m["root"] for m in ours["data"]] == [TINY.model, adapters.a1, adapters.a2]
    assert len({m["permission"][0]["id"] for m in ours["data"]}) == 3  # one per card, as captured
    assert operator_adapters.served_adapters(ours) == {"a1": adapters.a1, "a2": adapters.a2}
    assert operator_adapters.served_adapters(theirs) == {"a1": "/adapters/a1", "a2": "/adapters/a2"}


async def test_lora_modules_json_form_sets_the_parent(adapters: Adapters) -> None:
    (module,) = parse_lora_modules(
        [json.dumps({"name": "x", "path": adapters.a1, "base_model_name": "b"})]
    )
    config = dataclasses.replace(
        TINY, served_model_names=("tiny", "b"), lora=LoraConfig(modules=(module,))
    )
    async with serving(config) as served, httpx.AsyncClient(base_url=served.url) as client:
        body = (await client.get("/v1/models")).json()
    assert [(m["id"], m["parent"]) for m in body["data"]] == [
        ("tiny", None),
        ("b", None),
        ("x", "b"),
    ]


# -- load and unload ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "capture_name, name, path",
    [
        ("load-duplicate-name.txt", "a2", "a2"),  # path: the fixture's a2, loaded twice
        ("load-missing-path.txt", "a3", "/nonexistent/adapter"),
        ("load-rank-above-max.txt", "a4", "rank16"),
    ],
)
async def test_refused_loads_answer_as_captured(
    http: httpx.AsyncClient, adapters: Adapters, capture_name: str, name: str, path: str
) -> None:
    path = getattr(adapters, path, path)
    if capture_name == "load-duplicate-name.txt":
        assert (await _load(http, name, path)).status_code == 200
    response = await _load(http, name, path)
    body, status = captured(capture_name)
    assert (response.status_code, response.text) == (status, body)
    assert response.headers["content-type"] == "application/json"
    ours = operator_adapters.classify_refusal(response.status_code, response.text, path)
    assert ours == operator_adapters.classify_refusal(status, body, path)
    if capture_name == "load-duplicate-name.txt":
        assert ours is None  # another sync loaded it first
    else:
        assert (
            ours is not None
            and ours.reason
            == {
                "load-missing-path.txt": operator_adapters.FILES_MISSING,
                "load-rank-above-max.txt": operator_adapters.RANK_ABOVE_LIMIT,
            }[capture_name]
        )
    assert (await http.get("/health")).status_code == 200  # the engine stays healthy


async def test_unload_answers_as_captured(http: httpx.AsyncClient, adapters: Adapters) -> None:
    await _load(http, "a2", adapters.a2)
    removed = await http.post("/v1/unload_lora_adapter", json={"lora_name": "a2"})
    assert (removed.text, removed.status_code) == captured("unload-ok.txt")
    unknown = await http.post("/v1/unload_lora_adapter", json={"lora_name": "nope"})
    assert (unknown.text, unknown.status_code) == captured("unload-unknown.txt")
    names = [m["id"] for m in (await http.get("/v1/models")).json()["data"]]
    assert names == ["tiny", "a1"]


async def test_load_inplace_replaces_the_path(http: httpx.AsyncClient, adapters: Adapters) -> None:
    assert (await _load(http, "a1", adapters.a2, load_inplace=True)).status_code == 200
    body = (await http.get("/v1/models")).json()
    assert operator_adapters.served_adapters(body) == {"a1": adapters.a2}


@pytest.mark.parametrize(
    "body, status, message",
    [
        (
            {"lora_name": "a3", "lora_path": ""},
            400,
            "Both 'lora_name' and 'lora_path' must be provided.",
        ),
        (
            {"lora_name": "a3"},
            400,
            "1 validation error:\n  {'type': 'missing', 'loc': 'body.lora_path'",
        ),
        ({"lora_name": 3, "lora_path": "p"}, 400, "Input should be a valid string"),
    ],
)
async def test_malformed_loads_are_400s(
    http: httpx.AsyncClient, body: dict[str, Any], status: int, message: str
) -> None:
    response = await http.post("/v1/load_lora_adapter", json=body)
    assert response.status_code == status and message in response.json()["error"]["message"]


async def test_a_config_without_weights_is_a_load_failure(
    http: httpx.AsyncClient, adapters: Adapters
) -> None:
    response = await _load(http, "a5", adapters.no_weights)
    assert response.status_code == 500 and response.json()["error"]["type"] == "InternalServerError"
    refusal = operator_adapters.classify_refusal(500, response.text, adapters.no_weights)
    assert refusal is not None and refusal.reason == operator_adapters.LOAD_FAILED


async def test_without_runtime_updating_the_routes_do_not_exist(adapters: Adapters) -> None:
    config = dataclasses.replace(captured_config(adapters.a1), runtime_lora_updating=False)
    async with serving(config) as served, httpx.AsyncClient(base_url=served.url) as client:
        response = await _load(client, "a2", adapters.a2)
        unload = await client.post("/v1/unload_lora_adapter", json={"lora_name": "a1"})
        models = (await client.get("/v1/models")).json()
    assert (response.status_code, response.json()) == (404, {"detail": "Not Found"})
    assert unload.status_code == 404
    assert operator_adapters.served_adapters(models) == {"a1": adapters.a1}  # --lora-modules still


async def test_without_enable_lora_a_load_fails_and_no_lora_metric(adapters: Adapters) -> None:
    async with (
        serving(runtime_lora_updating=True) as served,
        httpx.AsyncClient(base_url=served.url) as client,
    ):
        response = await _load(client, "a2", adapters.a2)
        metrics = (await client.get("/metrics")).text
    assert response.status_code == 500 and "LoRA is not enabled" in response.text
    refusal = operator_adapters.classify_refusal(500, response.text, adapters.a2)
    assert refusal is not None and refusal.reason == operator_adapters.LOAD_FAILED
    assert "vllm:lora_requests_info" not in metrics


@pytest.mark.parametrize(
    "lora_path, lora_changes, expected",
    [
        ("owner/adapter", {}, 200),  # no local hub to ask: taken on trust, as a download would be
        ("owner/adapter", {"hub_offline": True}, 404),
        ("no-such-folder", {}, 404),  # neither a folder nor an owner/name id
    ],
)
async def test_hub_ids_without_a_local_hub(
    adapters: Adapters, lora_path: str, lora_changes: dict[str, Any], expected: int
) -> None:
    config = captured_config(adapters.a1, **lora_changes)
    async with serving(config) as served, httpx.AsyncClient(base_url=served.url) as client:
        response = await _load(client, "h", lora_path)
        models = (await client.get("/v1/models")).json()
    assert response.status_code == expected
    if expected == 404:
        assert (
            response.json()["error"]["message"]
            == f"Loading lora h failed: No adapter found for {lora_path}"
        )
    else:
        assert operator_adapters.served_adapters(models)["h"] == lora_path


async def test_hub_ids_are_read_from_the_local_hub(
    tmp_path: pathlib.Path, adapters: Adapters
) -> None:
    make_tiny_lora.write_adapter(tmp_path / "hub" / "org" / "small", rank=8)
    make_tiny_lora.write_adapter(tmp_path / "hub" / "org" / "wide", rank=16)
    with hub_thread.HubThread(tmp_path / "hub") as local:
        config = captured_config(adapters.a1, hub_endpoint=local.url)
        async with serving(config) as served, httpx.AsyncClient(base_url=served.url) as client:
            small = await _load(client, "small", "org/small")
            wide = await _load(client, "wide", "org/wide")
            missing = await _load(client, "gone", "org/gone")
    assert small.status_code == 200
    assert (wide.status_code, wide.json()["error"]["message"]) == (
        500,
        "Call to add_lora method failed: Worker failed with error 'LoRA rank 16 is greater than "
        "max_lora_rank 8.', please check the stack trace above for the root cause",
    )
    assert missing.status_code == 404 and "No adapter found for org/gone" in missing.text


def test_adapter_files_are_read_as_vllm_reads_them(
    adapters: Adapters, tmp_path: pathlib.Path
) -> None:
    assert adapterfiles.inspect(adapters.rank16) == adapterfiles.AdapterFiles(16, True)
    assert adapterfiles.inspect(adapters.no_weights) == adapterfiles.AdapterFiles(8, False)
    assert adapterfiles.inspect(str(tmp_path)) is None  # a folder, but no adapter_config.json
    assert adapterfiles.inspect(str(tmp_path / "missing")) is None
    assert [
        adapterfiles.is_hub_id(p) for p in ("org/name", "/abs/path", "a/b/c", "../x", "name")
    ] == [
        True,
        False,
        False,
        False,
        False,
    ]


def test_a_bad_lora_module_stops_the_engine_from_starting(adapters: Adapters) -> None:
    missing = "Loading lora a3 failed: No adapter found for /nonexistent/adapter"
    with pytest.raises(ValueError, match=re.escape(missing)):
        Engine(captured_config(adapters.a1, modules=(LoraModule("a3", "/nonexistent/adapter"),)))
    with pytest.raises(ValueError, match="LoRA rank 16 is greater than max_lora_rank 8"):
        Engine(captured_config(adapters.a1, modules=(LoraModule("big", adapters.rank16),)))


# -- serving an adapter ---------------------------------------------------------------------------


async def test_an_adapter_answers_differently_from_the_base(http: httpx.AsyncClient) -> None:
    request = {"prompt": "Say something", "max_tokens": 5}
    base = (await http.post("/v1/completions", json={**request, "model": "tiny"})).json()
    tuned = (await http.post("/v1/completions", json={**request, "model": "a1"})).json()
    again = (await http.post("/v1/completions", json={**request, "model": "a1"})).json()
    assert tuned["model"] == "a1" and base["model"] == "tiny"
    assert tuned["choices"][0]["text"] != base["choices"][0]["text"]
    assert tuned["choices"][0]["text"] == again["choices"][0]["text"]  # deterministic
    assert shape(tuned) == shape(base)
    chat = {
        "model": "a1",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 5,
        "stream": True,
    }
    stream = (await http.post("/v1/chat/completions", json=chat)).text
    events = [json.loads(e.removeprefix("data: ")) for e in stream.split("\n\n")[:-2]]
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in events)
    assert text == tuned["choices"][0]["text"] and {e["model"] for e in events} == {"a1"}


async def test_an_unloaded_adapter_answers_as_captured(
    http: httpx.AsyncClient, adapters: Adapters
) -> None:
    await _load(http, "a2", adapters.a2)
    await http.post("/v1/unload_lora_adapter", json={"lora_name": "a2"})
    response = await http.post(
        "/v1/completions", json={"model": "a2", "prompt": "x", "max_tokens": 2}
    )
    assert (response.text, response.status_code) == captured("completion-unloaded-adapter.txt")


# -- vllm:lora_requests_info ---------------------------------------------------------------------

_LORA_LINE = re.compile(
    r'^vllm:lora_requests_info\{max_lora="(\d+)",running_lora_adapters="([^"]*)",'
    r'waiting_lora_adapters="([^"]*)"\} (\S+)$',
    re.M,
)


async def test_lora_metric_is_shaped_like_the_capture(http: httpx.AsyncClient) -> None:
    before = time.time()
    await http.post("/v1/completions", json={"model": "a1", "prompt": "x", "max_tokens": 2})
    await http.post("/v1/completions", json={"model": "tiny", "prompt": "x", "max_tokens": 2})
    ours = (await http.get("/metrics")).text
    theirs = (LORA / "metrics-lora.txt").read_text()
    head = (
        "# HELP vllm:lora_requests_info Running stats on lora requests.\n"
        "# TYPE vllm:lora_requests_info gauge\n"
    )
    assert head in theirs and head in ours
    captured_rows = {(m, r, w) for m, r, w, _ in _LORA_LINE.findall(theirs)}
    assert captured_rows == {("2", "", ""), ("2", "a1", "a1"), ("2", "a2", "a2")}
    rows = {(m, r, w): float(v) for m, r, w, v in _LORA_LINE.findall(ours)}
    assert set(rows) == {("2", "", ""), ("2", "a1", "a1")}
    assert all(
        before <= stamp <= time.time() for stamp in rows.values()
    )  # a timestamp, as captured
    assert rows[("2", "", "")] >= rows[("2", "a1", "a1")]  # the idle state came last, as captured


async def test_lora_metric_lists_every_adapter_in_flight(adapters: Adapters) -> None:
    engine = Engine(
        captured_config(
            adapters.a1, modules=(LoraModule("a1", adapters.a1), LoraModule("a2", adapters.a2))
        )
    )

    def plan(name: str) -> Plan:
        return Plan(name, 1, 1, 1, "length", 1, lora=name, shift=1)

    async with (
        engine.generate(plan("a1")),
        engine.generate(plan("a2")),
        engine.generate(plan("a1")),
    ):
        busy = engine.exposition().decode()
    idle = engine.exposition().decode()
    assert ("2", "a1,a2", "a1,a2") in {(m, r, w) for m, r, w, _ in _LORA_LINE.findall(busy)}
    assert ("2", "", "") in {(m, r, w) for m, r, w, _ in _LORA_LINE.findall(idle)}


# -- how the engine is started: the CLI and the fleet's pods --------------------------------------


def test_serve_refuses_a_missing_lora_module(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["serve", "--host", "127.0.0.1", "--port", "0", "--model", "m"]
    assert server.main([*argv, "--lora-modules", "a=/x"]) == 2
    assert "needs --enable-lora" in capsys.readouterr().err
    assert server.main([*argv, "--enable-lora", "--lora-modules", "a3=/nonexistent/adapter"]) == 2
    assert (
        "Loading lora a3 failed: No adapter found for /nonexistent/adapter"
        in capsys.readouterr().err
    )


def test_fleet_reads_lora_flags_and_env_from_the_pod() -> None:
    module = '{"name": "a1", "path": "/adapters/a1"}'
    pod = {
        "metadata": {
            "name": "p",
            "namespace": "ml",
            "uid": "u",
            "labels": {pods.INFERENCE_LABEL: "d"},
        },
        "spec": {
            "containers": [
                {
                    "name": "vllm",
                    "command": [
                        "sh",
                        "-c",
                        "vllm serve /models/tiny --served-model-name tiny --enable-lora "
                        "--max-lora-rank 32 --max-loras 4",
                    ],
                    "args": ["--max-cpu-loras", "8", "--lora-modules", module],
                    "env": [
                        {"name": "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "value": "True"},
                        {"name": "HF_ENDPOINT", "value": "http://127.0.0.1:8090"},
                        {"name": "HF_HUB_OFFLINE", "value": "1"},
                    ],
                }
            ]
        },
        "status": {"phase": "Running", "podIP": "127.1.0.9"},
    }
    config = pods.engine_config_from_pod(pod)
    assert config is not None and config.runtime_lora_updating
    assert config.lora == LoraConfig(
        max_rank=32,
        max_loras=4,
        max_cpu_loras=8,
        modules=(LoraModule("a1", "/adapters/a1"),),
        hub_endpoint="http://127.0.0.1:8090",
        hub_offline=True,
    )
    plain = json.loads(json.dumps(pod))
    plain["spec"]["containers"][0].update(
        command=["vllm", "serve", "/models/tiny"], args=[], env=[]
    )
    config = pods.engine_config_from_pod(plain)
    assert config is not None and config.lora is None and not config.runtime_lora_updating
    plain["spec"]["containers"][0]["args"] = ["--enable-lora", "--max-lora-rank", "7"]
    assert pods.engine_config_from_pod(plain) is None  # vLLM refuses a rank outside its choices


def test_registry_is_ordered_and_checks_names_first() -> None:
    registry = lora.Registry("tiny", max_rank=8)
    files = adapterfiles.AdapterFiles(8, True)
    for name in ("b", "a"):
        assert registry.add(lora.LoadRequest(name, f"/{name}", False), files) is None
    assert [a.name for a in registry] == ["b", "a"]
    duplicate = registry.add(lora.LoadRequest("b", "/missing", False), None)
    assert duplicate is not None and duplicate["error"]["code"] == 400  # before the files


def test_a_path_under_a_pod_volume_is_read_from_the_volumes_folder(tmp_path) -> None:
    from shardwise_runtime.sim import adapterfiles, pods

    folder = tmp_path / "pv" / "adapters" / "k1"
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text('{"r": 16}')
    (folder / "adapter_model.safetensors").write_bytes(b"x")
    mounts = (("/model-cache", str(tmp_path / "pv")),)
    assert adapterfiles.remap("/model-cache/adapters/k1", mounts) == str(folder)
    assert adapterfiles.remap("/model-cachex/a", mounts) == "/model-cachex/a"
    assert adapterfiles.inspect("/model-cache/adapters/k1", mounts=mounts) == adapterfiles.AdapterFiles(16, True)
    assert adapterfiles.inspect("/model-cache/adapters/k1") is None  # not on this machine without the mount
    pod = {"metadata": {"namespace": "ns"}, "spec": {
        "volumes": [{"name": "cache", "persistentVolumeClaim": {"claimName": "model-cache-1", "readOnly": True}},
                    {"name": "dshm", "emptyDir": {}}],
        "containers": [{"name": "vllm", "volumeMounts": [{"name": "cache", "mountPath": "/model-cache"},
                                                         {"name": "dshm", "mountPath": "/dev/shm"}]}]}}
    assert pods.claim_mounts(pod) == {"/model-cache": ("ns", "model-cache-1")}
