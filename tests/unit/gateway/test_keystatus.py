"""An APIKey's status: cumulative usage, two conditions, and no write when nothing changed."""

from shardwise.gateway.decide import keystatus, quota

NOW = "2026-01-01T00:00:00Z"


def obj(status=None):
    return {"metadata": {"name": "a", "namespace": "n", "generation": 2}, "status": status or {}}


def test_usage_adds_to_the_stored_counters():
    first = keystatus.desired_status(obj(), quota.Usage(2, 10, 20, 1500, 1), problem=None, key_hash="ab" * 32,
                                     store_up=True, now=NOW)
    assert (first["requests"], first["promptTokens"], first["completionTokens"], first["totalTokens"]) == (2, 10, 20, 30)
    assert first["costUSD"] == 0.0015 and first["rateLimited"] == 1 and first["keyId"] == "ab" * 6
    assert first["lastUsed"] == NOW and first["observedGeneration"] == 2
    assert {c["type"]: c["status"] for c in first["conditions"]} == {"Ready": "True", "QuotaShared": "True"}
    second = keystatus.desired_status(obj(first), quota.Usage(1, 1, 1, 0), problem=None, key_hash="ab" * 32,
                                      store_up=True, now="2026-01-01T00:01:00Z")
    assert second["requests"] == 3 and second["totalTokens"] == 32
    patch = keystatus.patch_for(obj(first), second)
    assert set(patch) == {"requests", "promptTokens", "completionTokens", "totalTokens", "lastUsed"}


def test_nothing_changed_writes_nothing():
    first = keystatus.desired_status(obj(), None, problem=None, key_hash=None, store_up=True, now=NOW)
    again = keystatus.desired_status(obj(first), None, problem=None, key_hash=None, store_up=True,
                                     now="2026-01-01T00:05:00Z")
    assert keystatus.patch_for(obj(first), again) is None


def test_conditions_say_what_is_wrong():
    status = keystatus.desired_status(obj(), None, problem="Secret s not found", key_hash=None, store_up=False,
                                      now=NOW)
    by_type = {c["type"]: c for c in status["conditions"]}
    assert by_type["Ready"]["status"] == "False" and "Secret s" in by_type["Ready"]["message"]
    assert by_type["QuotaShared"]["status"] == "False" and by_type["QuotaShared"]["reason"] == "StoreUnreachable"
    no_store = keystatus.desired_status(obj(), None, problem=None, key_hash=None, store_up=None, now=NOW)
    assert [c["type"] for c in no_store["conditions"]] == ["Ready"]


def test_a_key_in_the_last_applied_annotation_is_ready_with_a_warning():
    warned = keystatus.desired_status(obj(), None, problem=None, key_hash="ab" * 32, store_up=None, now=NOW,
                                      warning="Secret s carries the key; remove the annotation and rotate the key")
    ready = {c["type"]: c for c in warned["conditions"]}["Ready"]
    assert (ready["status"], ready["reason"]) == ("True", "KeyInLastApplied")
    assert "remove the annotation and rotate" in ready["message"]
    fixed = keystatus.desired_status(obj(warned), None, problem=None, key_hash="ab" * 32, store_up=None,
                                     now="2026-01-01T00:01:00Z")
    patch = keystatus.patch_for(obj(warned), fixed)
    assert [c["reason"] for c in patch["conditions"]] == ["KeyActive"]
    unusable = keystatus.desired_status(obj(), None, problem="disabled", key_hash=None, store_up=None, now=NOW,
                                        warning="ignored")
    assert {c["type"]: c["reason"] for c in unusable["conditions"]}["Ready"] == "KeyNotUsable"
