"""The key table: hashes only, stable ids, and a reason for every key that cannot be used."""

import base64
import json

from shardwise.gateway.decide import keys


def secret(name, token=None, ns="team"):
    data = {"key": base64.b64encode(token.encode()).decode()} if token is not None else {}
    return keys.slim_secret({"metadata": {"name": name, "namespace": ns, "labels": {"shardwise.io/api-key": "true"}},
                             "data": data})


def apikey(name, secret_name, ns="team", **spec):
    return {"metadata": {"name": name, "namespace": ns}, "spec": {"secretName": secret_name, **spec}}


def test_the_secret_keeps_only_the_hash():
    slim = secret("s", "sk-plain")
    assert "data" not in slim and "sk-plain" not in repr(slim)
    assert slim[keys.HASH_FIELD] == keys.hash_key("sk-plain")


def test_lookup_by_token_and_policy():
    table = keys.build_table([apikey("alice", "s", models=["m1"], requestsPerMinute=5, tokensPerMinute=100,
                                     maxConcurrentRequests=2)], [secret("s", "sk-1")])
    key = table.lookup("sk-1")
    assert key == keys.Key("team/alice", frozenset({"m1"}), 5, 100, 2)
    assert key.allows("m1") and not key.allows("m2") and key.limited
    assert table.lookup("sk-2") is None
    assert table.hashes["team/alice"] == keys.hash_key("sk-1")


def test_empty_models_allows_every_model():
    key = keys.build_table([apikey("a", "s")], [secret("s", "k")]).lookup("k")
    assert key.allows("anything") and not key.limited


def test_bearer():
    assert keys.bearer("Bearer sk-1") == "sk-1"
    assert keys.bearer("bearer   sk-1 ") == "sk-1"
    assert keys.bearer("Basic abc") is None and keys.bearer("Bearer ") is None and keys.bearer(None) is None


def test_unusable_keys_say_why():
    table = keys.build_table(
        [apikey("nosecret", "missing"), apikey("empty", "e"), apikey("off", "s1", disabled=True),
         apikey("bad", "s2", requestsPerMinute=0), apikey("z-dup", "s3"), apikey("a-first", "s3b"),
         apikey("other-ns", "s1", ns="elsewhere"), {"metadata": {"name": "nospec", "namespace": "team"}}],
        [secret("e"), secret("s1", "k1"), secret("s2", "k2"), secret("s3", "same"), secret("s3b", "same")])
    problems = table.problems
    assert "not found" in problems["team/nosecret"]
    assert "no data key" in problems["team/empty"]
    assert "disabled" in problems["team/off"]
    assert "requestsPerMinute" in problems["team/bad"]
    assert "team/a-first" in problems["team/z-dup"]  # the first by id keeps a shared key
    assert "not found" in problems["elsewhere/other-ns"]  # Secrets are read from the APIKey's namespace
    assert "secretName" in problems["team/nospec"]
    assert table.lookup("k1") is None and table.lookup("same").id == "team/a-first"


def test_deleting_objects_are_skipped():
    obj = apikey("a", "s")
    obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert keys.build_table([obj], [secret("s", "k")]).lookup("k") is None


def applied_secret(name, token, annotation, ns="team"):
    meta = {"name": name, "namespace": ns, "labels": {"shardwise.io/api-key": "true"},
            "annotations": {keys.LAST_APPLIED: annotation}}
    return keys.slim_secret({"metadata": meta, "data": {"key": base64.b64encode(token.encode()).decode()}})


def last_applied(**fields):
    return json.dumps({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "team"},
                       **fields})


def test_a_key_left_in_the_last_applied_annotation_works_and_warns():
    by_string = applied_secret("s1", "sk-1", last_applied(stringData={"key": "sk-1"}))
    by_data = applied_secret("s2", "sk-2", last_applied(data={"key": base64.b64encode(b"sk-2").decode()}))
    assert "annotations" not in by_string["metadata"] and "sk-1" not in repr(by_string)  # flag only, no copy
    table = keys.build_table([apikey("a", "s1"), apikey("b", "s2")], [by_string, by_data])
    assert table.lookup("sk-1").id == "team/a" and table.lookup("sk-2").id == "team/b"
    assert set(table.warnings) == {"team/a", "team/b"} and not table.problems
    assert keys.LAST_APPLIED in table.warnings["team/a"] and "kubectl create secret generic" in table.warnings["team/a"]
    assert "kubectl annotate secret s1 kubectl.kubernetes.io/last-applied-configuration-" in table.warnings["team/a"]


def test_no_warning_without_the_current_key_in_the_annotation():
    secrets = [
        applied_secret("old", "sk-new", last_applied(stringData={"key": "sk-old"})),  # rotated since: another key
        applied_secret("meta", "sk-3", last_applied(metadata={"name": "meta", "labels": {"a": "b"}})),
        applied_secret("junk", "sk-4", "not json"),
        secret("plain", "sk-5"),
    ]
    table = keys.build_table([apikey("a", "old"), apikey("b", "meta"), apikey("c", "junk"), apikey("d", "plain")],
                             secrets)
    assert table.warnings == {} and len(table.hashes) == 4
    not_json = keys.build_table([apikey("e", "t")], [applied_secret("t", "sk-6", "stringData: {key: sk-6}")])
    assert set(not_json.warnings) == {"team/e"}  # not JSON: found as text
