"""The key table: hashes only, stable ids, and a reason for every key that cannot be used."""

import base64

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
