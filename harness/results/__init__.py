"""Results: the run directory's files (``files``), the raw records in them (``records``), the
typed summary derived from them (``model``), the steps that bring older files to the current version
(``migrations``), and the pandas view for notebooks (``frames``, imported only when used: ``import
harness`` never imports pandas)."""

from harness.results.files import (
    READABLE_VERSIONS,
    SCHEMA_VERSION,
    RunDir,
    UnreadLines,
    append_jsonl,
    read_json,
    read_jsonl,
    read_records,
    read_run_record,
    write_json_atomic,
    write_text_atomic,
)
from harness.results.model import (
    ArmSummary,
    CategoryMetrics,
    CellMetrics,
    ExactnessBlock,
    ExactnessEntry,
    ExactnessSection,
    ExactnessShares,
    RepeatMetrics,
    Summary,
    load_summary,
    parse_summary,
)
from harness.results.records import (
    ArmStatus,
    AttentionBackend,
    DraftCounting,
    Invocation,
    RequestRecord,
    RunTiming,
    GpuNeighbour,
    WindowCpu,
    WindowGpu,
    WindowPower,
    WindowRecord,
)

__all__ = [
    "READABLE_VERSIONS", "SCHEMA_VERSION", "ArmStatus", "ArmSummary", "AttentionBackend", "DraftCounting", "Invocation", "RunTiming", "WindowCpu", "WindowGpu", "GpuNeighbour", "CategoryMetrics", "CellMetrics",
    "ExactnessBlock", "ExactnessEntry", "ExactnessSection", "ExactnessShares", "RepeatMetrics", "RequestRecord",
    "RunDir", "Summary", "UnreadLines", "WindowPower", "WindowRecord", "append_jsonl", "load_summary",
    "parse_summary", "read_json", "read_jsonl", "read_records", "read_run_record", "write_json_atomic",
    "write_text_atomic",
]
