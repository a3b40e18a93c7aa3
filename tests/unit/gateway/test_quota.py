"""Token-bucket arithmetic and the per-replica fallback, in virtual time."""

from shardwise.gateway.decide import keys, quota


def key(**limits):
    return keys.Key("ns/k", frozenset(), **limits)


def test_refill_and_retry_after():
    assert quota.refill(0, 0, 30, 60) == 30
    assert quota.refill(50, 0, 600, 60) == 60
    assert quota.retry_after_s(1, 60) == 1
    assert quota.retry_after_s(0.01, 60) == 1  # never below 1
    assert quota.retry_after_s(1, 3) == 20
    assert quota.retry_after_s(50, 100) == 30


def test_requests_bucket_bursts_a_minute_then_refills():
    limiter = quota.LocalLimiter()
    k = key(requests_per_minute=3)
    assert [limiter.admit(k, 0).allowed for _ in range(4)] == [True, True, True, False]
    refused = limiter.admit(k, 0)
    assert refused == quota.Verdict(False, quota.REQUESTS, 20)
    assert not limiter.admit(k, 19.9).allowed
    assert limiter.admit(k, 20.0).allowed


def test_tokens_are_charged_after_and_may_overdraw():
    limiter = quota.LocalLimiter()
    k = key(tokens_per_minute=100)
    assert limiter.admit(k, 0).allowed
    limiter.charge(k, 150, 0)  # the level is -50
    refused = limiter.admit(k, 0)
    assert refused.kind == quota.TOKENS and refused.retry_after_s == 31
    assert not limiter.admit(k, 29.9).allowed
    assert limiter.admit(k, 30.1).allowed


def test_concurrency_until_released():
    limiter = quota.LocalLimiter()
    k = key(max_concurrent=1)
    assert limiter.admit(k, 0).allowed
    assert limiter.admit(k, 0) == quota.Verdict(False, quota.CONCURRENCY, 1)
    limiter.release(k)
    assert limiter.admit(k, 0).allowed


def test_fallback_share_divides_each_limit():
    limiter = quota.LocalLimiter(share=2)
    k = key(requests_per_minute=10, max_concurrent=1)
    assert quota.share_of(10, 2) == 5 and quota.share_of(1, 4) == 1
    results = []
    for _ in range(6):
        results.append(limiter.admit(k, 0).allowed)
        limiter.release(k)
    assert results == [True] * 5 + [False]


def test_usage_sums_and_fields():
    total = quota.Usage()
    total.add(quota.Usage(requests=1, prompt=3, completion=4, cost_micro_usd=5))
    total.add(quota.Usage(limited=2))
    assert total == quota.Usage(1, 3, 4, 5, 2) and total
    assert not quota.Usage()
    assert quota.Usage.from_fields({b"requests": b"2", b"prompt": "7", b"other": 1}) == quota.Usage(2, 7)
