"""bench/gateway_figures.py: percentiles, added latency, CPU from /proc stat lines, the targets."""

from __future__ import annotations

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "bench"))

import gateway_figures as figures  # noqa: E402


def stat_line(pid: int, comm: str, ppid: int, utime: int, stime: int) -> str:
    """A /proc/<pid>/stat line as the kernel writes it (fields 1..20, the rest elided)."""
    fields = [str(pid), f"({comm})", "S", str(ppid), "1", "1", "0", "-1", "4194304",
              "100", "0", "0", "0", str(utime), str(stime), "0", "0", "20", "0", "4"]
    return " ".join(fields) + "\n"


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([5.0], 50, 5.0),
        ([1.0, 2.0, 3.0, 4.0], 50, 2.5),  # interpolated between the two middle ranks
        ([4.0, 1.0, 3.0, 2.0], 50, 2.5),  # order does not matter
        ([float(i) for i in range(101)], 99, 99.0),
        ([0.0, 10.0], 99, 9.9),
        ([1.0, 2.0, 3.0], 0, 1.0),
        ([1.0, 2.0, 3.0], 100, 3.0),
    ],
)
def test_percentile_interpolates_like_numpy(values: list[float], q: float, expected: float) -> None:
    assert figures.percentile(values, q) == pytest.approx(expected)


def test_percentile_refuses_nothing_and_out_of_range() -> None:
    with pytest.raises(ValueError):
        figures.percentile([], 50)
    with pytest.raises(ValueError):
        figures.percentile([1.0], 101)


def test_added_latency_is_the_difference_of_percentiles_not_the_percentile_of_differences() -> None:
    direct = [0.020] * 98 + [0.030, 0.040]
    proxied = [0.021] * 98 + [0.060, 0.080]
    row = figures.figures_of("proxy", ttft_s=proxied, gaps_s=[0.010, 0.012], errors=0, wall_s=2.0,
                             cpu_s=0.5, baseline=(figures.Distribution.of(direct),
                                                  figures.Distribution.of([0.010, 0.010])))
    assert row.added_ttft.p50 == pytest.approx(0.001)
    assert row.added_ttft.p99 == pytest.approx(figures.percentile(proxied, 99) - figures.percentile(direct, 99))
    assert row.added_gap.p50 == pytest.approx(0.001)


def test_the_baseline_adds_nothing_over_itself() -> None:
    row = figures.figures_of("direct", ttft_s=[0.02, 0.03], gaps_s=[0.01], errors=0, wall_s=1.0,
                             cpu_s=None, baseline=None)
    assert row.added_ttft == figures.Distribution(0.0, 0.0)
    assert row.cpu_per_1k is None and row.as_json()["cpu_s_per_1k_requests"] is None


def test_stat_fields_survive_a_comm_with_spaces_and_parentheses() -> None:
    line = stat_line(42, "envoy (worker) 1", ppid=7, utime=1234, stime=56)
    assert figures.parent_pid(line) == 7
    assert figures.cpu_ticks(line) == 1290


def test_stat_field_refuses_what_is_not_a_stat_line() -> None:
    with pytest.raises(ValueError):
        figures.cpu_ticks("garbage")


def test_cpu_of_a_contender_counts_its_whole_process_tree_and_nothing_else() -> None:
    stats = {
        1: stat_line(1, "init", 0, 999, 999),
        10: stat_line(10, "envoy", 1, 100, 50),  # a root
        11: stat_line(11, "python", 10, 7, 3),  # a child of it
        12: stat_line(12, "python", 11, 1, 1),  # a grandchild
        20: stat_line(20, "python", 1, 30, 10),  # the other root
        30: stat_line(30, "bystander", 1, 500, 500),
    }
    assert figures.process_tree([10, 20, 99], stats) == {10, 11, 12, 20}  # 99: gone
    before = figures.tree_cpu_ticks([10, 20], stats)
    later = dict(stats)
    later[10] = stat_line(10, "envoy", 1, 300, 150)  # +300 ticks
    later[20] = stat_line(20, "python", 1, 40, 20)  # +20 ticks
    later[13] = stat_line(13, "python", 10, 5, 5)  # new child: counts from zero
    del later[12]  # exited: what it spent in between is lost
    after = figures.tree_cpu_ticks([10, 20], later)
    assert figures.cpu_seconds_between(before, after, ticks_per_second=100) == pytest.approx(
        (300 + 20 + 10 - 0) / 100)  # pid 11 unchanged


def test_cpu_per_thousand_requests() -> None:
    assert figures.cpu_per_thousand(3.0, 1500) == pytest.approx(2.0)
    with pytest.raises(ValueError):
        figures.cpu_per_thousand(1.0, 0)


def _row(name: str, added_ttft_p99: float, added_gap_p99: float, cpu_s: float | None) -> figures.Figures:
    zero = figures.Distribution(0.0, 0.0)
    return figures.Figures(name=name, requests=1000, errors=0, wall_s=10.0, ttft=zero, gap=zero,
                           added_ttft=figures.Distribution(0.0, added_ttft_p99),
                           added_gap=figures.Distribution(0.0, added_gap_p99), cpu_s=cpu_s)


def test_targets_met_and_not_met() -> None:
    floor = _row("envoy", 0.001, 0.001, cpu_s=1.0)
    peer = _row("vllm-router", 0.010, 0.005, cpu_s=3.0)
    good = figures.target_lines(_row("shardwise", 0.004, 0.002, cpu_s=1.4), floor, [peer])
    assert [line.endswith("met") and "NOT" not in line for line in good] == [True, True, True]
    bad = figures.target_lines(_row("shardwise", 0.006, 0.006, cpu_s=1.6), floor, [peer])
    assert all("NOT met" in line for line in bad)
    assert "vllm-router" in bad[2]


def test_error_rate_counts_failures_among_all_sent() -> None:
    row = figures.Figures(name="x", requests=990, errors=10, wall_s=1.0,
                          ttft=figures.Distribution(0, 0), gap=figures.Distribution(0, 0),
                          added_ttft=figures.Distribution(0, 0), added_gap=figures.Distribution(0, 0),
                          cpu_s=None)
    assert row.error_rate == pytest.approx(0.01)


def test_table_has_a_row_per_contender() -> None:
    table = figures.format_table([_row("direct", 0, 0, None), _row("envoy", 0.001, 0.0, 1.0)])
    lines = table.splitlines()
    assert len(lines) == 3 and lines[1].startswith("direct") and lines[2].rstrip().endswith("1.00")


def test_key_checks_are_the_keyed_gateway_minus_the_plain_one_in_the_same_run() -> None:
    def measured(name: str, ttft: tuple[float, float], gap: tuple[float, float], cpu_s: float) -> figures.Figures:
        zero = figures.Distribution(0.0, 0.0)
        return figures.Figures(name=name, requests=1000, errors=0, wall_s=10.0,
                               ttft=figures.Distribution(*ttft), gap=figures.Distribution(*gap),
                               added_ttft=zero, added_gap=zero, cpu_s=cpu_s)

    plain = measured("shardwise", (0.070, 0.150), (0.010, 0.020), cpu_s=2.0)
    keyed = measured("shardwise+keys", (0.072, 0.155), (0.010, 0.021), cpu_s=2.5)
    lines = figures.key_check_lines(keyed, plain, redis_commands_per_request=2.0)
    assert "TTFT p50 +2.00 ms, p99 +5.00 ms" in lines[0] and "chunk gap p50 +0.00 ms, p99 +1.00 ms" in lines[0]
    assert "2.50 s per 1,000 requests, 1.25x without" in lines[1]
    assert lines[2].startswith("Redis commands per request: 2.00")
    assert len(figures.key_check_lines(keyed, plain, None)) == 2
