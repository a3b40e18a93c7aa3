"""The arithmetic of `make bench-gateway`: percentiles, latency added over the baseline, CPU from /proc.

Pure (no I/O, no clock), so each rule is a unit test away (tests/unit/bench/). The benchmark
reads /proc and runs the processes; everything it prints is computed here.

Added latency is the difference of percentiles, not the percentile of differences: a request
through a proxy and one straight to an engine are different requests, so only the two
distributions can be compared. p99 added = p99(contender) - p99(direct).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence

# Targets of issue 20 for shardwise's gateway.
TARGET_ADDED_TTFT_P99_S = 0.005
TARGET_CPU_VS_ENVOY = 1.5


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation between closest ranks (numpy's default)."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile {q} outside 0..100")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclasses.dataclass(frozen=True)
class Distribution:
    """p50 and p99 of one measured quantity, seconds."""

    p50: float
    p99: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Distribution:
        return cls(p50=percentile(values, 50), p99=percentile(values, 99))

    def minus(self, baseline: Distribution) -> Distribution:
        """What this distribution adds over the baseline, percentile by percentile."""
        return Distribution(p50=self.p50 - baseline.p50, p99=self.p99 - baseline.p99)


# /proc/<pid>/stat, after the `(comm)` field: state is field 3 of the whole line, so the
# fields after the closing parenthesis start at 3 (proc(5)).
_PPID, _UTIME, _STIME = 4, 14, 15


def _fields_after_comm(stat: str) -> list[str]:
    # comm may hold spaces and parentheses; it ends at the LAST ')'.
    close = stat.rfind(")")
    if close < 0:
        raise ValueError(f"not a /proc/<pid>/stat line: {stat[:80]!r}")
    return stat[close + 1 :].split()


def stat_field(stat: str, number: int) -> int:
    """Field `number` (1-based, as numbered in proc(5)) of a /proc/<pid>/stat line, from 3 on."""
    if number < 3:
        raise ValueError("pid and comm are not numeric fields")
    return int(_fields_after_comm(stat)[number - 3])


def cpu_ticks(stat: str) -> int:
    """utime + stime of one process (all its threads), in clock ticks."""
    return stat_field(stat, _UTIME) + stat_field(stat, _STIME)


def parent_pid(stat: str) -> int:
    return stat_field(stat, _PPID)


def process_tree(roots: Iterable[int], stats: Mapping[int, str]) -> set[int]:
    """The roots that are alive in `stats` (pid -> stat line) and all their descendants."""
    children: dict[int, list[int]] = {}
    for pid, stat in stats.items():
        children.setdefault(parent_pid(stat), []).append(pid)
    found: set[int] = set()
    todo = [pid for pid in roots if pid in stats]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, ()))
    return found


def tree_cpu_ticks(roots: Iterable[int], stats: Mapping[int, str]) -> dict[int, int]:
    """pid -> CPU ticks so far, for every process of the contender (its roots' whole trees)."""
    return {pid: cpu_ticks(stats[pid]) for pid in process_tree(roots, stats)}


def command_name(stat: str) -> str:
    """The process's command name (the stat line's second field, in parentheses)."""
    return stat[stat.index("(") + 1:stat.rindex(")")]


def cpu_seconds_by_command(before: Mapping[int, int], after: Mapping[int, int],
                           stats: Mapping[int, str], ticks_per_second: int) -> dict[str, float]:
    """The CPU of `cpu_seconds_between`, split by command name: which process spent it."""
    spent: dict[str, float] = {}
    for pid, ticks in after.items():
        name = command_name(stats[pid]) if pid in stats else "?"
        spent[name] = spent.get(name, 0.0) + (ticks - before.get(pid, 0)) / ticks_per_second
    return spent


def cpu_seconds_between(
    before: Mapping[int, int], after: Mapping[int, int], ticks_per_second: int
) -> float:
    """CPU a set of processes spent between two snapshots (pid -> ticks).

    A process that appeared in between counts from zero; one that exited in between is lost
    with what it spent since `before` (a contender's processes live for the whole run, and the
    bench fails a contender whose processes died).
    """
    spent = sum(ticks - before.get(pid, 0) for pid, ticks in after.items())
    return spent / ticks_per_second


def cpu_per_thousand(cpu_s: float, requests: int) -> float:
    """CPU-seconds per 1,000 requests."""
    if requests <= 0:
        raise ValueError("no requests")
    return cpu_s * 1000.0 / requests


@dataclasses.dataclass(frozen=True)
class Figures:
    """One contender's run, with what it adds over the direct baseline."""

    name: str
    requests: int
    errors: int
    wall_s: float
    ttft: Distribution
    gap: Distribution
    added_ttft: Distribution
    added_gap: Distribution
    cpu_s: float | None  # None: no proxy processes (the direct baseline)

    @property
    def error_rate(self) -> float:
        total = self.requests + self.errors
        return self.errors / total if total else 1.0

    @property
    def requests_per_s(self) -> float:
        return self.requests / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def cpu_per_1k(self) -> float | None:
        if self.cpu_s is None or self.requests == 0:
            return None
        return cpu_per_thousand(self.cpu_s, self.requests)

    def as_json(self) -> dict[str, object]:
        def ms(value: float) -> float:
            return round(value * 1000.0, 3)

        cpu = self.cpu_per_1k
        return {
            "contender": self.name,
            "requests": self.requests,
            "errors": self.errors,
            "requests_per_s": round(self.requests_per_s, 1),
            "ttft_p50_ms": ms(self.ttft.p50),
            "ttft_p99_ms": ms(self.ttft.p99),
            "chunk_gap_p50_ms": ms(self.gap.p50),
            "chunk_gap_p99_ms": ms(self.gap.p99),
            "added_ttft_p50_ms": ms(self.added_ttft.p50),
            "added_ttft_p99_ms": ms(self.added_ttft.p99),
            "added_chunk_gap_p50_ms": ms(self.added_gap.p50),
            "added_chunk_gap_p99_ms": ms(self.added_gap.p99),
            "cpu_s": None if self.cpu_s is None else round(self.cpu_s, 3),
            "cpu_s_per_1k_requests": None if cpu is None else round(cpu, 3),
        }


def figures_of(
    name: str,
    *,
    ttft_s: Sequence[float],
    gaps_s: Sequence[float],
    errors: int,
    wall_s: float,
    cpu_s: float | None,
    baseline: tuple[Distribution, Distribution] | None,
) -> Figures:
    """A contender's figures from its raw samples; `baseline` (TTFT, gap) None: it is the baseline."""
    ttft, gap = Distribution.of(ttft_s), Distribution.of(gaps_s)
    base_ttft, base_gap = baseline if baseline is not None else (ttft, gap)
    return Figures(
        name=name,
        requests=len(ttft_s),
        errors=errors,
        wall_s=wall_s,
        ttft=ttft,
        gap=gap,
        added_ttft=ttft.minus(base_ttft),
        added_gap=gap.minus(base_gap),
        cpu_s=cpu_s,
    )


def target_lines(candidate: Figures, floor: Figures | None, peers: Sequence[Figures]) -> list[str]:
    """Issue 20's targets for `candidate` (shardwise's gateway), one line each with its verdict."""

    def verdict(ok: bool) -> str:
        return "met" if ok else "NOT met"

    lines = [
        f"added TTFT p99 <= {TARGET_ADDED_TTFT_P99_S * 1000:g} ms: "
        f"{candidate.added_ttft.p99 * 1000:.2f} ms, "
        f"{verdict(candidate.added_ttft.p99 <= TARGET_ADDED_TTFT_P99_S)}"
    ]
    if floor is not None and floor.cpu_per_1k and candidate.cpu_per_1k is not None:
        ratio = candidate.cpu_per_1k / floor.cpu_per_1k
        lines.append(
            f"CPU per request <= {TARGET_CPU_VS_ENVOY:g}x Envoy alone: {ratio:.2f}x, "
            f"{verdict(ratio <= TARGET_CPU_VS_ENVOY)}"
        )
    else:
        lines.append(f"CPU per request <= {TARGET_CPU_VS_ENVOY:g}x Envoy alone: not measured")
    if peers:
        worse = [
            peer.name
            for peer in peers
            if not (
                candidate.added_ttft.p99 < peer.added_ttft.p99
                and candidate.added_gap.p99 < peer.added_gap.p99
            )
        ]
        names = ", ".join(peer.name for peer in peers)
        lines.append(
            f"lower added latency (TTFT p99 and chunk gap p99) than every peer ({names}): "
            + ("met" if not worse else f"NOT met (not lower than {', '.join(worse)})")
        )
    else:
        lines.append("lower added latency than every peer: no peer measured")
    return lines


def key_check_lines(keyed: Figures, plain: Figures, redis_commands_per_request: float | None) -> list[str]:
    """Issue 21's figures: what the key and quota checks add, the gateway with keys (`keyed`)
    against the same gateway without (`plain`), measured in the same run; and the Redis commands
    each request costs (None: not counted)."""
    added_ttft, added_gap = keyed.ttft.minus(plain.ttft), keyed.gap.minus(plain.gap)
    lines = [f"added by the key and quota checks: TTFT p50 {added_ttft.p50 * 1000:+.2f} ms, "
             f"p99 {added_ttft.p99 * 1000:+.2f} ms; chunk gap p50 {added_gap.p50 * 1000:+.2f} ms, "
             f"p99 {added_gap.p99 * 1000:+.2f} ms"]
    if keyed.cpu_per_1k is not None and plain.cpu_per_1k:
        lines.append(f"CPU with keys (gateway, Envoy and Redis): {keyed.cpu_per_1k:.2f} s per 1,000 requests, "
                     f"{keyed.cpu_per_1k / plain.cpu_per_1k:.2f}x without")
    if redis_commands_per_request is not None:
        lines.append(f"Redis commands per request: {redis_commands_per_request:.2f} "
                     "(pipelined commands counted each; a script is one)")
    return lines


def format_table(rows: Sequence[Figures]) -> str:
    """The side-by-side table: one row per contender, milliseconds and CPU-seconds."""
    header = (
        "contender",
        "req/s",
        "errors",
        "TTFT p50",
        "p99",
        "+TTFT p50",
        "+p99",
        "gap p50",
        "p99",
        "+gap p50",
        "+p99",
        "CPU s/1k req",
    )
    body = []
    for row in rows:
        cpu = row.cpu_per_1k
        body.append(
            (
                row.name,
                f"{row.requests_per_s:.1f}",
                f"{row.errors}",
                f"{row.ttft.p50 * 1000:.2f}",
                f"{row.ttft.p99 * 1000:.2f}",
                f"{row.added_ttft.p50 * 1000:+.2f}",
                f"{row.added_ttft.p99 * 1000:+.2f}",
                f"{row.gap.p50 * 1000:.2f}",
                f"{row.gap.p99 * 1000:.2f}",
                f"{row.added_gap.p50 * 1000:+.2f}",
                f"{row.added_gap.p99 * 1000:+.2f}",
                "-" if cpu is None else f"{cpu:.2f}",
            )
        )
    widths = [max(len(str(cells[i])) for cells in [header, *body]) for i in range(len(header))]
    lines = [
        "  ".join(
            cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(cells)
        )
        for cells in [header, *body]
    ]
    return "\n".join(lines)
