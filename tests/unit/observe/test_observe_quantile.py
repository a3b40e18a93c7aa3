"""histogram_quantile() against PromQL's BucketQuantile semantics (promql/quantile.go)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shardwise.observe.aggregate import histogram_quantile

INF = math.inf


@pytest.mark.parametrize(
    ("q", "buckets", "expected"),
    [
        # Linear interpolation inside the bucket holding rank q*count.
        (0.5, [(1, 2), (2, 6), (INF, 10)], 1 + (5 - 2) / (6 - 2)),
        # The lowest bucket interpolates from 0 when its bound is positive.
        (0.5, [(0.5, 10), (INF, 10)], 0.25),
        # Rank in the +Inf bucket: the highest finite bound.
        (0.9, [(1, 1), (2, 1), (INF, 10)], 2.0),
        (1.0, [(1, 1), (2, 9), (INF, 10)], 2.0),
        # q == 1 with nothing in +Inf: the top of the last populated bucket.
        (1.0, [(1, 5), (2, 10), (INF, 10)], 2.0),
        # A rank exactly on a bucket's count stays in that bucket (count >= rank).
        (0.5, [(1, 5), (2, 10), (INF, 10)], 1.0),
        # Lowest bound <= 0: returned as is.
        (0.5, [(-1, 10), (INF, 10)], -1.0),
        (0.5, [(0, 10), (1, 10), (INF, 10)], 0.0),
        # Input order does not matter.
        (0.5, [(INF, 10), (2, 6), (1, 2)], 1.75),
        # Equal bounds are merged (their counts added).
        (0.5, [(1, 2), (1, 3), (2, 10), (INF, 10)], 1.0),
        # Decreasing counts are flattened to the envelope: (2, 3) becomes (2, 5).
        (0.6, [(1, 5), (2, 3), (3, 10), (INF, 10)], 2.2),
        # q == 0 over an empty lowest bucket is Go's 0/0.
        (0.0, [(1, 0), (2, 5), (INF, 5)], math.nan),
        (0.0, [(1, 3), (2, 5), (INF, 5)], 0.0),
        # NaN cases: no +Inf bucket, only the +Inf bucket, no observations, q NaN.
        (0.5, [(1, 5), (2, 10)], math.nan),
        (0.5, [(INF, 10)], math.nan),
        (0.5, [(1, 0), (INF, 0)], math.nan),
        (0.5, [], math.nan),
        (math.nan, [(1, 5), (INF, 10)], math.nan),
        # Out-of-range q.
        (-0.1, [(1, 5), (INF, 10)], -INF),
        (1.1, [(1, 5), (INF, 10)], INF),
        (-0.1, [], -INF),  # PromQL checks q before looking at the buckets
    ],
)
def test_promql_semantics(q: float, buckets: list[tuple[float, float]], expected: float) -> None:
    got = histogram_quantile(q, buckets)
    if math.isnan(expected):
        assert math.isnan(got)
    else:
        assert got == pytest.approx(expected)


def _walk(q: float, bounds: list[float], per_bucket: list[int]) -> float:
    """An independent reference: walk the observations bucket by bucket (positive bounds)."""
    total = sum(per_bucket)
    rank = q * total
    seen = 0
    lower = 0.0
    for bound, n in zip(bounds, per_bucket, strict=True):
        if n and seen + n >= rank:
            return lower + (bound - lower) * (rank - seen) / n
        seen += n
        lower = bound
    return bounds[-1]  # rank beyond the finite buckets: in +Inf


@given(
    bounds=st.lists(st.floats(0.001, 1000), min_size=1, max_size=12, unique=True).map(sorted),
    data=st.data(),
    q=st.floats(0.01, 1.0),
)
def test_matches_a_bucket_walk(bounds: list[float], data: st.DataObject, q: float) -> None:
    per_bucket = data.draw(st.lists(st.integers(0, 50), min_size=len(bounds) + 1,
                                    max_size=len(bounds) + 1))
    if sum(per_bucket) == 0:
        return
    cumulative, running = [], 0
    for bound, n in zip([*bounds, INF], per_bucket, strict=True):
        running += n
        cumulative.append((bound, float(running)))
    got = histogram_quantile(q, cumulative)
    # The walk skips empty buckets where PromQL may land at the start of the next populated one
    # (same value), so compare values, not bucket indices.
    assert got == pytest.approx(_walk(q, [*bounds, bounds[-1]], per_bucket), rel=1e-9, abs=1e-12)
