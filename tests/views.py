"""The pages of stored runs as the commands render them (each run analysed once, then rendered)."""

from __future__ import annotations

from pathlib import Path

from harness.analysis import load_analysis
from harness.report import render_comparison as _compare
from harness.report import render_report as _render


def render_report(run_dir: Path) -> str:
    return _render(load_analysis(run_dir))


def render_comparison(run_a: Path, run_b: Path, force: bool) -> str:
    return _compare(load_analysis(run_a), load_analysis(run_b), force)
