"""A study's ``analysis.md``: its tables as Markdown for design docs, written by the study when it
ends and refreshed by `bench show STUDY` (which reads a study and never imports its execution)."""

from __future__ import annotations

from harness.results.files import write_text_atomic
from harness.study.collect import StudyResults
from harness.study.tables import markdown

ANALYSIS_FILE = "analysis.md"


def write_analysis(results: StudyResults) -> None:
    """``analysis.md``: the study's tables as Markdown, for design docs."""
    write_text_atomic(results.root / ANALYSIS_FILE, markdown(results))
