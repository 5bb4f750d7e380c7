"""Machine calibrations on the run side (``bench calibrate``, ``bench run``): the regime a
calibration measures, the spread it finds, where it is stored and which one a run may use.

A calibration is the start-up spread of one regime on one machine (``harness.results.calibration``).
``calibration_regime`` makes the small regime that measures it: the same regime, every arm's
server started N >= 5 times in rounds, on a small window; ``measure_calibration`` turns that run's
summary into a ``Calibration`` (the arms x rounds model's residual spread, ``harness.derive.intervals``).
It is stored as ``<regime>-<fingerprint>-<machine>.json`` in the user's cache (or a store the user
names), and ``find_calibration`` / ``chosen_calibration`` give ``prepare_run`` the one made for this
regime's fingerprint on this machine: any other is never used, and one the user names that does not
match is refused with what differs, as comparisons are.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from harness.config.level import LoadLevel
from harness.config.regime import Regime
from harness.core.errors import UserError
from harness.core.machine import environment_fingerprint, identity_differences, machine_identity
from harness.derive.intervals import (
    CALIBRATION_MAX_AGE_H,
    Estimate,
    RoundTable,
    Spread,
    arm_spread,
    cell_estimates,
    residual_spread,
)
from harness.results import Summary, read_json, write_json_atomic
from harness.results.calibration import Calibration

MIN_ROUNDS = 5  # fewer leave the spread itself too uncertain to stand in for a run's own
DEFAULT_ROUNDS = 6
WINDOW_PROMPTS = 8  # the small window's default prompts (or the regime's, when fewer)
WINDOW_OUTPUT_TOKENS = 32  # ... and output tokens: the spread is the servers', not the window's


def default_store() -> Path:
    """The user's calibration store: ``BENCH_CACHE_DIR/calibrations`` when that is set (where the
    harness caches models), else ``$XDG_CACHE_HOME/spec-bench/calibrations`` (``~/.cache`` without
    it)."""
    if bench := os.environ.get("BENCH_CACHE_DIR"):
        return Path(bench) / "calibrations"
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "spec-bench" / "calibrations"


def calibration_regime(
    regime: Regime,
    rounds: int = DEFAULT_ROUNDS,
    num_prompts: int | None = None,
    max_output_tokens: int | None = None,
) -> Regime:
    """The regime that calibrates ``regime``: the same engine, target, arms, workloads and load
    levels, every arm's server started ``rounds`` times, each window once, on a small window
    (``num_prompts``, ``max_output_tokens``: by default the regime's, at most 8 and 32); no ramp, no
    exactness or distribution check, no workload pass (they measure load that moves and outputs, not
    the spread). Its name is ``<name>-calibration``, so its run does not sit among the regime's own."""
    if regime.sweep is not None:
        raise UserError(
            f"regime '{regime.name}' is a study (a sweep: section): calibrate one of its points' regimes"
        )
    if len(regime.arms) < 2:
        raise UserError(
            f"regime '{regime.name}' has one arm: a calibration measures the start-up spread of arms "
            "against the baseline, so it needs the baseline and at least one other arm"
        )
    if rounds < MIN_ROUNDS:
        raise UserError(f"--rounds {rounds}: a calibration needs at least {MIN_ROUNDS} rounds")
    load = regime.load
    data = regime.model_dump(mode="json")
    data["name"] = f"{regime.name}-calibration"
    data["description"] = f"Machine calibration of {regime.name}: {rounds} start-ups per arm, small window."
    data["load"] |= {
        "server_starts": rounds,
        "repeats": 1,
        "num_prompts": num_prompts if num_prompts is not None else min(load.num_prompts, WINDOW_PROMPTS),
        "max_output_tokens": (
            max_output_tokens
            if max_output_tokens is not None
            else min(load.max_output_tokens, WINDOW_OUTPUT_TOKENS)
        ),
        # the spread is measured on the fixed windows; a ramp is minutes of load that moves, once per
        # start-up (the test regime's 2 x 2.5 s ramp was 62 s of its 90-s calibration)
        "ramp": [],
    }
    data["exactness"] = {**data["exactness"], "enabled": False}
    data["distribution_check"] = {**data["distribution_check"], "enabled": False}
    # nor the workload pass (the covariate's mean: an interval's, not the spread's)
    data["verdict"] = {**data["verdict"], "covariate": "none"}
    data["gates"] = {}  # nothing gates a calibration run
    try:
        return Regime.model_validate(data)
    except ValidationError as exc:  # a window the regime's own checks refuse (e.g. too few prompts)
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        raise UserError(f"the calibration regime of '{regime.name}': {where}: {error['msg']}") from None


def _complete_rounds(table: RoundTable) -> int:
    """The rounds every measured arm of a cell has (0 with fewer than two arms)."""
    measured = [{r for r, v in by_round.items() if v and v > 0} for by_round in table.values()]
    measured = [rounds for rounds in measured if rounds]
    return len(set.intersection(*measured)) if len(measured) >= 2 else 0


def cell_tables(summary: Summary) -> dict[tuple[str, LoadLevel], dict[str, dict[int, float]]]:
    """Every (workload, load level) cell's table of start-up mean tok/s: arm -> round -> tok/s."""
    tables: dict[tuple[str, LoadLevel], dict[str, dict[int, float]]] = {}
    for cell in summary.cells:
        tables.setdefault((cell.workload, cell.level), {})[cell.arm] = cell.startup_tok_s()
    return tables


def measure_calibration(
    summary: Summary,
    regime: Regime,
    environment: dict[str, Any],
    created: datetime | None = None,
) -> Calibration:
    """The calibration a calibration run measured: the residual spread of its cells (those with
    the baseline or another arm beside one more, over two or more common rounds), for ``regime``
    (the calibrated regime: its fingerprint, not the small window's) on the machine of
    ``environment`` (the run's environment.json)."""
    tables = [t for t in cell_tables(summary).values() if _complete_rounds(t) >= 2]
    found = residual_spread(tables)
    if found is None:
        raise UserError(
            f"{summary.run_id}: no cell has two arms measured on two or more of the same start-ups, so "
            "there is no spread to measure (did the arms fail? bench show the run)"
        )
    sd, df = found
    arm_sd, arm_df = arm_spread(tables) or (None, None)
    measured = {arm for table in tables for arm in table}
    return Calibration(
        regime_name=regime.name,
        regime_fingerprint=regime.fingerprint(),
        machine_fingerprint=environment_fingerprint(environment),
        machine=machine_identity(environment),
        created=(created or datetime.now(UTC)).isoformat(timespec="seconds"),
        run_id=summary.run_id,
        rounds=min(_complete_rounds(t) for t in tables),
        arms=[arm.name for arm in regime.arms if arm.name in measured],
        sd=sd,
        df=df,
        cells=len(tables),
        arm_sd=arm_sd,
        arm_df=arm_df,
    )


def write_calibration(calibration: Calibration, store: Path | None = None) -> Path:
    """The calibration in ``store`` (default: ``default_store()``) as its own file name, replacing
    an earlier calibration of the same regime and machine; returns the file."""
    path = (store or default_store()) / calibration.file_name()
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, calibration.model_dump(mode="json"))
    return path


def read_calibration(path: Path) -> Calibration:
    """One calibration file, validated (a file that is not one is an error naming it)."""
    if not path.is_file():
        raise UserError(f"{path}: no such calibration file (bench calibrate REGIME writes one)")
    try:
        return Calibration.model_validate(read_json(path))
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"]) or "(top level)"
        raise UserError(f"{path}: not a calibration file: {where}: {error['msg']}") from None


def find_calibration(store: Path, regime: Regime, environment: dict[str, Any]) -> Calibration | None:
    """The newest calibration in ``store`` of ``regime``'s fingerprint on the machine of
    ``environment``; None when there is none. Only files named for this regime fingerprint and
    machine are read, and each must hold what its name says."""
    fingerprint, machine = regime.fingerprint(), environment_fingerprint(environment)
    suffix = f"-{fingerprint[:12]}-{machine[:12]}.json"
    found = []
    for path in sorted(store.glob(f"*{suffix}")) if store.is_dir() else []:
        calibration = read_calibration(path)
        if (calibration.regime_fingerprint, calibration.machine_fingerprint) == (fingerprint, machine):
            found.append(calibration)
    return max(found, key=lambda c: c.created, default=None)


def calibration_mismatch(calibration: Calibration, regime: Regime, environment: dict[str, Any]) -> list[str]:
    """What keeps ``calibration`` from describing ``regime`` on the machine of ``environment``: one
    line per difference (none: it matches)."""
    problems = []
    if calibration.regime_fingerprint != regime.fingerprint():
        problems.append(
            f"regime fingerprint: {calibration.regime_fingerprint} (calibrated: "
            f"{calibration.regime_name}) vs {regime.fingerprint()} (this run: {regime.name})"
        )
    machine = environment_fingerprint(environment)
    if calibration.machine_fingerprint != machine:
        differences = identity_differences(calibration.machine, machine_identity(environment))
        problems.append(
            f"machine fingerprint: {calibration.machine_fingerprint} vs {machine} (this machine)"
            + (f": {'; '.join(differences)}" if differences else "")
        )
    return problems


@dataclass(frozen=True)
class CalibrationSource:
    """Where ``prepare_run`` finds this machine's calibration of the regime (``bench run``'s
    --calibration-store, --calibration, --no-calibration)."""

    store: Path | None = None  # the store searched (None: default_store())
    file: Path | None = None  # a calibration the user named: used when it matches, refused when not
    enabled: bool = True  # False: no calibration, whatever the store holds


def calibration_age_h(calibration: Calibration, now: datetime | None = None) -> float:
    """Hours since the calibration was made (a calibration without a readable time: infinitely old)."""
    try:
        created = datetime.fromisoformat(calibration.created)
    except ValueError:
        return math.inf
    created = created if created.tzinfo else created.replace(tzinfo=UTC)
    return ((now or datetime.now(UTC)) - created).total_seconds() / 3600


def _stale(calibration: Calibration) -> str | None:
    """Why a calibration is too old to stand in for today's start-up spread (None: it is not)."""
    age = calibration_age_h(calibration)
    if age <= CALIBRATION_MAX_AGE_H:
        return None
    return (
        f"{calibration.label()} is {age / 24:.1f} days old; a calibration holds for "
        f"{CALIBRATION_MAX_AGE_H:.0f} h (shared machines of one type measured 3.5% and 7.6% start-up "
        "spreads on different days)"
    )


def chosen_calibration(
    source: CalibrationSource,
    regime: Regime,
    environment: dict[str, Any],
    regime_path: Path | str = "",
    notes: list[str] | None = None,
) -> Calibration | None:
    """The calibration a run of ``regime`` on the machine of ``environment`` uses: the file the
    user named (refused, with what differs, unless it was made for this regime fingerprint on this
    machine within CALIBRATION_MAX_AGE_H), or the store's match while it is that young (an older
    one is left out, and why is added to ``notes``), or none."""
    if not source.enabled:
        return None
    if source.file is None:
        found = find_calibration(source.store or default_store(), regime, environment)
        why = _stale(found) if found is not None else None
        if why is not None:
            if notes is not None:
                notes.append(f"not used: {why}; bench calibrate {regime_path or 'REGIME'} makes a fresh one")
            return None
        return found
    calibration = read_calibration(source.file)
    problems = calibration_mismatch(calibration, regime, environment)
    if (why := _stale(calibration)) is not None:
        problems.append(f"age: {why}")
    if problems:
        raise UserError(
            f"{source.file}: this calibration does not describe {regime_path or regime.name} on this "
            "machine today; its spread says nothing about this run, so nothing was started:\n  "
            + "\n  ".join(problems)
            + f"\nCalibrate this regime here (bench calibrate {regime_path or 'REGIME'}), or run without "
            "--calibration."
        )
    return calibration


def calibration_text(calibration: Calibration) -> str:
    """The spread a calibration found, as ``bench calibrate`` prints it."""
    cells = f"{calibration.cells} cell" + ("s" if calibration.cells != 1 else "")
    one_arm = (
        f"; one arm across rounds {100 * calibration.arm_sd:.1f}%, the round's drift included, for "
        f"relative gates ({calibration.arm_df} degrees of freedom)"
        if calibration.arm_sd is not None
        else ""
    )
    return (
        f"start-up spread {100 * calibration.sd:.1f}% (residual sd of log start-up tok/s; "
        f"{calibration.df} degrees of freedom; {cells}, {calibration.rounds} rounds of "
        f"{len(calibration.arms)} arms){one_arm}"
    )


def one_start_up_interval(calibration: Calibration) -> Estimate:
    """What the calibration buys: the interval a run with one start-up per arm now gets around an
    observed 1.00x (the one model's, ``harness.derive.intervals.cell_estimates``, with the spread given)."""
    spread = Spread(calibration.sd, calibration.df, calibration.label())
    return cell_estimates({"baseline": {0: 1.0}, "arm": {0: 1.0}}, "baseline", spread)["arm"]
