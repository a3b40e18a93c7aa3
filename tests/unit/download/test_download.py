"""The downloader against the local hub, through the real huggingface_hub client."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time
import urllib.request

import pytest
from shardwise_runtime.download import main as downloader
from shardwise_runtime.download.progress import Progress
from shardwise_runtime.sim.hub_thread import HubThread
from shardwise_runtime.sim.tinymodel import write_tiny_model

REPO = "tiny/llama"


@pytest.fixture
def hub_root(tmp_path: pathlib.Path) -> pathlib.Path:
    root = tmp_path / "hub"
    write_tiny_model(root / REPO, shards=2, shard_bytes=1 << 20)
    write_tiny_model(root / "tiny/gated", shards=1, shard_bytes=4096, gated_token="hf_secret")
    return root


def test_downloads_every_file_verified_and_pinned(hub_root: pathlib.Path, tmp_path: pathlib.Path) -> None:
    dest = tmp_path / "cache"
    with HubThread(hub_root) as local:
        progress = Progress()
        result = downloader.download(REPO, "main", dest, endpoint=local.url, token=None, parallel=4,
                                     progress=progress)
        commit = result["commit"]
        assert len(commit) == 40 and result["verified"] and result["files"] == 4
        for name in ("config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"):
            assert (dest / name).read_bytes() == (hub_root / REPO / name).read_bytes()
        assert progress.as_dict()["bytesDone"] == progress.bytes_total == result["bytes"]
        served = local.hub.served(REPO)
        # A second run finds the marker and fetches nothing.
        again = downloader.download(REPO, commit, dest, endpoint=local.url, token=None, parallel=4, progress=Progress())
        assert again["commit"] == commit and local.hub.served(REPO) == served


@pytest.mark.parametrize(("repo", "token", "reason"), [
    ("tiny/gated", None, "GatedModelNeedsToken"),
    ("tiny/gated", "hf_wrong", "GatedModelAccessDenied"),
    ("tiny/missing", None, "ModelNotFound"),
])
def test_hub_refusals_are_precise_and_permanent(hub_root: pathlib.Path, tmp_path: pathlib.Path, repo: str,
                                                token: str | None, reason: str) -> None:
    with HubThread(hub_root) as local, pytest.raises(Exception) as caught:
        downloader.download(repo, "main", tmp_path / "c", endpoint=local.url, token=token, parallel=2,
                            progress=Progress())
    failed = downloader.classify(caught.value, repo, "main")
    assert (failed.reason, failed.exit_code) == (reason, downloader.PERMANENT)
    assert repo in failed.message


def test_gated_model_with_the_token_downloads(hub_root: pathlib.Path, tmp_path: pathlib.Path) -> None:
    with HubThread(hub_root) as local:
        result = downloader.download("tiny/gated", "main", tmp_path / "c", endpoint=local.url, token="hf_secret",
                                     parallel=2, progress=Progress())
    assert result["verified"]


def test_unknown_revision_is_revision_not_found(hub_root: pathlib.Path, tmp_path: pathlib.Path) -> None:
    with HubThread(hub_root) as local, pytest.raises(Exception) as caught:
        downloader.download(REPO, "v9", tmp_path / "c", endpoint=local.url, token=None, parallel=2, progress=Progress())
    assert downloader.classify(caught.value, REPO, "v9").reason == "RevisionNotFound"


def _progress(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/progress", timeout=2) as response:
        return json.loads(response.read())


def test_killed_download_resumes_without_fetching_finished_bytes(hub_root: pathlib.Path, tmp_path: pathlib.Path) -> None:
    """Kill the process mid-way; the second run fetches only what the first did not finish."""
    from shardwise.devcluster.processes import free_port

    write_tiny_model(hub_root / "tiny/big", shards=2, shard_bytes=4 << 20)
    repo, dest = "tiny/big", tmp_path / "cache"
    sizes = {p.name: p.stat().st_size for p in (hub_root / repo).iterdir()}
    total = sum(sizes.values())
    with HubThread(hub_root, throttle_bps=2 << 20) as local:
        port = free_port()
        env = {**os.environ, "SHARDWISE_TERMINATION_LOG": str(tmp_path / "term1")}
        argv = [sys.executable, "-m", "shardwise_runtime.download.main", "--repo", repo, "--dest", str(dest),
                "--endpoint", local.url, "--parallel", "1", "--port", str(port)]
        first = subprocess.Popen(argv, env=env)
        deadline = time.monotonic() + 60
        seen: dict = {}
        while time.monotonic() < deadline:
            try:
                seen = _progress(port)
            except OSError:
                seen = {}
            if seen.get("bytesTotal") and seen["bytesDone"] > seen["bytesTotal"] * 0.6:
                break
            time.sleep(0.1)
        assert seen.get("state") == "Downloading" and seen["bytesPerSecond"] > 0, seen
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        finished = {name for name in sizes if (dest / name).is_file()}
        assert "model-00001-of-00002.safetensors" in finished and len(finished) < len(sizes)
        partial = sum(p.stat().st_size for p in dest.rglob("*.part"))
        assert partial > 0, "the kill should leave a part file to resume"
        before = dict(local.hub.bytes_served)
        env["SHARDWISE_TERMINATION_LOG"] = str(tmp_path / "term2")
        second = subprocess.run([*argv[:-2], "--port", "0"], env=env, timeout=120)
        assert second.returncode == 0
        outcome = json.loads((tmp_path / "term2").read_text())
        assert outcome["state"] == "Complete" and outcome["verified"]
        # Finished files were not fetched again; the file in flight resumed with Range from the
        # bytes already on disk, so the second run fetched exactly what was missing.
        second_run = {name: local.hub.bytes_served[(repo, name)] - before.get((repo, name), 0) for name in sizes}
        assert all(second_run[name] == 0 for name in finished), second_run
        assert sum(second_run.values()) == total - sum(sizes[n] for n in finished) - partial


def test_a_full_disk_is_a_permanent_precise_failure() -> None:
    import errno

    failed = downloader.classify(OSError(errno.ENOSPC, "No space left on device"), REPO, "main")
    assert (failed.reason, failed.exit_code) == ("DiskFull", downloader.PERMANENT)
    assert "cache.size" in failed.message


def test_rate_and_time_left_over_the_window() -> None:
    progress = Progress(bytes_total=1000)
    progress.sample(0.0, 0)
    progress.sample(5.0, 500)
    fields = progress.as_dict()
    assert (fields["bytesPerSecond"], fields["etaSeconds"]) == (100, 5)
    progress.sample(30.0, 500)  # stalled: the window forgets the old rate
    assert progress.as_dict()["bytesPerSecond"] == 0 and progress.as_dict()["etaSeconds"] is None


def test_a_retry_continues_the_commit_the_first_attempt_resolved(hub_root: pathlib.Path, tmp_path: pathlib.Path) -> None:
    """`main` moved upstream between two attempts: the retry asks for the first commit, not the
    new one (this local hub keeps no history, so here that commit is gone; the real hub serves it)."""
    dest = tmp_path / "cache"
    (dest / downloader.PARTS).mkdir(parents=True)
    (dest / downloader.PARTS / "pinned.json").write_text(json.dumps({"repo": REPO, "revision": "main",
                                                                      "commit": "0" * 40}))
    with HubThread(hub_root) as local, pytest.raises(Exception) as caught:
        downloader.download(REPO, "main", dest, endpoint=local.url, token=None, parallel=2, progress=Progress())
    failed = downloader.classify(caught.value, REPO, "main")
    assert (failed.reason, failed.exit_code) == ("PinnedCommitGone", downloader.PERMANENT)
    assert "0" * 40 in failed.message and local.hub.served(REPO) == 0


def test_snapshot_download_reads_the_tree_as_vllm_does_for_an_adapter(hub_root: pathlib.Path,
                                                                     tmp_path: pathlib.Path) -> None:
    # vLLM fetches a LoRA adapter given by hub id with snapshot_download, which lists the tree.
    from huggingface_hub import HfApi

    with HubThread(hub_root) as local:
        folder = HfApi(endpoint=local.url).snapshot_download(repo_id=REPO, cache_dir=str(tmp_path / "hf"))
    expected = sorted(p.name for p in (hub_root / REPO).iterdir())
    assert sorted(os.listdir(folder)) == expected
