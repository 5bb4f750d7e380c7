"""A run's gate verdicts as stored: one ``Check`` per gate and cell (what a JUnit test case and a
terminal row show), and ``RUN_DIR/gate/checks.json``, the last ``bench gate`` of a run, which the
report reads (``read_gate``). The gates that fill them are ``harness.derive.gates``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from harness.core.errors import UserError
from harness.results.files import read_json
from harness.results.records import ResultModel

Verdict = str  # "pass" | "fail" | "inconclusive" | "skipped" | "error"
# What an inconclusive check makes of the gate (``bench gate --inconclusive``): by default its own
# outcome and exit code (never a pass: the check was not cleared), or, chosen and recorded, a pass
# or a regression.
InconclusivePolicy = Literal["inconclusive", "pass", "fail"]
EXIT_PASS, EXIT_REGRESSION, EXIT_INFRASTRUCTURE, EXIT_INCONCLUSIVE = 0, 1, 3, 4
# a night whose gate was inconclusive only for want of power: every check it could not clear had its
# point within the limit (``harness.derive.gates.evaluate.night_outcome``); exit 4 all the same
UNDERPOWERED = "underpowered"
# each exit code's outcome, as the history keeps it (``runs.gate_outcome``, with UNDERPOWERED)
OUTCOMES = {
    EXIT_PASS: "pass",
    EXIT_REGRESSION: "regression",
    EXIT_INFRASTRUCTURE: "infrastructure failure",
    EXIT_INCONCLUSIVE: "inconclusive",
}


@dataclass
class Check:
    """One gate on one cell: what a JUnit test case and a terminal row show."""

    name: str
    gate: str  # where it comes from: "rules[0]", "golden_tau[1]", "arm"
    arm: str
    metric: str
    workload: str | None
    concurrency: int | None
    verdict: Verdict
    message: str
    value: float | None = None
    baseline_value: float | None = None
    low: float | None = (
        None  # interval of the value (absolute gates) or of the relative change (regression gates)
    )
    high: float | None = None
    p_value: float | None = None
    n: int = 0
    n_baseline: int = 0
    request_rate: float | None = None  # open-loop cells: the window's rate (concurrency is its cap)


class StoredGate(ResultModel):
    """``RUN_DIR/gate/checks.json``: the last ``bench gate`` of a run (the report shows its checks)."""

    baseline_run: str | None
    exit_code: int  # 0 pass, 1 regression, 3 infrastructure, 4 inconclusive
    checks: list[Check]
    # what an inconclusive check counted as (``bench gate --inconclusive``): "inconclusive" (its own
    # outcome, exit 4: the default), or "pass" / "fail" as chosen
    inconclusive: InconclusivePolicy = "inconclusive"
    # ``bench gate --confirm``: the run that re-measured the failing arms on fresh start-ups, and its
    # own checks against the same baseline (``checks`` then holds the combined verdicts)
    confirmation_run: str | None = None
    confirmation_checks: list[Check] = []


GATE_FILE = Path("gate") / "checks.json"


def read_gate(run_dir: Path) -> StoredGate | None:
    """The run's stored gate verdicts, or None when ``bench gate`` has not run on it."""
    path = run_dir / GATE_FILE
    if not path.is_file():
        return None
    try:
        return StoredGate.model_validate(read_json(path))
    except ValidationError as exc:
        first = exc.errors()[0]
        raise UserError(f"{path}: {'.'.join(map(str, first['loc']))}: {first['msg']}") from None
