from shardwise.kube.compare import contains


def test_defaults_added_by_the_server_do_not_count_as_drift() -> None:
    desired = {"spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "vllm", "args": ["a", "b"]}]}}}}
    live = {"metadata": {"resourceVersion": "7"},
            "spec": {"replicas": 2, "revisionHistoryLimit": 10,
                     "template": {"spec": {"containers": [{"name": "vllm", "args": ["a", "b"],
                                                           "imagePullPolicy": "IfNotPresent"}]}}}}
    assert contains(live, desired)


def test_changed_scalar_list_and_missing_field_are_drift() -> None:
    desired = {"spec": {"replicas": 2, "args": ["a", "b"], "ports": [{"port": 8000}]}}
    assert not contains({"spec": {"replicas": 3, "args": ["a", "b"], "ports": [{"port": 8000}]}}, desired)
    assert not contains({"spec": {"replicas": 2, "args": ["a"], "ports": [{"port": 8000}]}}, desired)
    assert not contains({"spec": {"replicas": 2, "args": ["a", "b"]}}, desired)
    assert not contains({"spec": {"replicas": 2, "args": ["a", "b"], "ports": [{"port": 8001}]}}, desired)


def test_booleans_are_not_numbers() -> None:
    assert not contains({"x": 1}, {"x": True})
    assert contains({"x": 1.0}, {"x": 1})


def test_merge_patch_is_empty_when_nothing_changed_and_removes_vanished_keys() -> None:
    from shardwise.kube.compare import merge_patch

    current = {"plan": {"tp": 8, "old": 1}, "latency": {"ttft": 3}, "replicas": 2}
    assert merge_patch(current, {"plan": {"tp": 8, "old": 1}, "replicas": 2}) == {}
    assert merge_patch(current, {"plan": {"tp": 4}, "replicas": 2}) == {"plan": {"tp": 4, "old": None}}
