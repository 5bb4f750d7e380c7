"""The intervals cover what they claim: benchmarks/interval_coverage.py's simulation, smaller and
with a fixed seed (the benchmark prints the full table: docs/statistics.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import interval_coverage as coverage  # noqa: E402

RUNS = 600  # Monte Carlo sd of a 0.95 coverage: 0.009; the bounds below are 3 sd wide


@pytest.mark.parametrize(
    "setting",
    [
        coverage.Setting(0.03, 2, 2, 1.0),
        coverage.Setting(0.06, 3, 7, 1.0),
        coverage.Setting(0.03, 5, 3, 1.10),
    ],
    ids=lambda s: s.label(),
)
def test_cell_interval_covers_and_rarely_says_pays_at_a_true_one(setting: coverage.Setting) -> None:
    lines = dict(coverage.cell_lines([setting], RUNS, seed=1))
    assert 0.92 <= lines[f"coverage  cell speedup          {setting.label()}"] <= 0.98
    if setting.truth == 1.0:
        assert lines[f"false pays  cell speedup        {setting.label()}"] <= 0.045
    if setting.truth == 1.0 and setting.arms > 2:
        # the fastest of six arms that are all truly 1.00x, corrected for the selection
        assert lines[f"false pays  winner, corrected   {setting.label()}"] <= 0.03


def test_one_start_up_with_a_calibration_covers() -> None:
    (line,) = coverage.calibration_lines([0.04], RUNS, seed=2)
    assert 0.92 <= line[1] <= 0.98
