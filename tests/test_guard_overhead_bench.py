"""benchmarks/guard_overhead.py's interleaved mode: every round times the three configurations on
every clock, and the ratios are per round (structure only: no wall time is asserted)."""

from __future__ import annotations

from benchmarks import guard_overhead as bench


def test_each_round_times_every_configuration_on_every_clock_and_ratios_are_per_round():
    samples = bench.interleaved(calls=30, rounds=3)
    assert len(samples) == 3
    for sample in samples:
        assert set(sample) == set(bench.INTERLEAVED)
        for figures in sample.values():
            assert set(figures) == set(bench.CLOCKS) and all(value >= 0 for value in figures.values())
    ratios = bench.ratios(samples, "guard_priced", "wall")
    assert ratios == [s["guard_priced"]["wall"] / s["bare_span"]["wall"] for s in samples]
    lines = bench._interleaved_lines(samples, 30)
    rows = [line for line in lines if line.startswith("| ")]
    assert len(rows) == 1 + 3 + 1  # header, one row per round, the medians
    assert rows[-1].startswith("| **median**")
