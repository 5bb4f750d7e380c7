"""`bench capacity REGIME`: per arm, the highest request rate within the regime's SLO, searched on
the real server, and each speculative arm's capacity against the baseline's."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from harness.commands.common import EXIT_ENGINE, EXIT_OK, add_override_flags, overrides_from, read_regime
from harness.core.errors import UserError
from harness.derive.capacity import ArmCapacity, CapacityAnalysis

NAME = "capacity"
SUMMARY = "search each arm's highest request rate within the regime's SLO (TTFT/TPOT/E2E targets)"
DESCRIPTION = """
The production form of the question: how many more requests a second does speculation let this
deployment serve within its latency targets? For each arm, open-loop windows of a fixed number of
requests (the regime's arrival process, the same schedule for every arm at a rate) are sent at a
rate that doubles from --start-rate while the regime's SLO attainment target (slo.target_pct) holds
(up to --max-rate) and halves while it does not, then is bisected between the highest rate that held
and the lowest that did not until they are within --resolution. Each probe's attainment has a Wilson
95% interval; each arm's capacity is compared with the baseline's, between the ends of the two
brackets.

Each arm's search ends on a named rule, printed with the probes it used of --max-probes:
resolution, max-rate, min-rate (no rate held down to --start-rate/16), missed-without-load (at the
lowest rate the attainment's interval lies below the target and halving did not raise it: a lower
rate whose interval still holds the target never ends it), max-probes, or ended-early (the engine
failed). Each probe's failed requests (HTTP errors, timeouts) are counted apart from its SLO misses.

The regime needs an slo: section. Results go to RESULTS_DIR/<regime>/capacity-<id>/ (capacity.json,
each arm's probes.jsonl and samples.jsonl). No rate is offered above twice the highest that held.
"""
EXAMPLES = """
bench capacity regimes/cpu_default.yaml --set slo.ttft_ms=500 --set slo.tpot_ms=50
bench capacity regimes/h100_tp1_llama31_8b.yaml --start-rate 4 --max-probes 10
bench capacity REGIME --endpoint baseline=http://10.0.0.5:8000 --endpoint ngram_k4=http://10.0.0.6:8000
"""
MAX_RATE_RPS = 1000.0  # far above what one deployment serves; a cap keeps every rate finite
# the highest --max-rate taken: past it no client sends on schedule (the window is one burst)
RATE_LIMIT_RPS = 1e6
INTERRUPTED = "servers stopped; the probes so far are kept in the capacity directory"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("regime", type=Path, help="regime YAML file with an slo: section")
    parser.add_argument(
        "--results-dir", type=Path, default=Path("results"), help="where it is stored (default: results)"
    )
    parser.add_argument("--workload", help="the workload to probe with (default: the regime's first)")
    parser.add_argument(
        "--start-rate",
        type=float,
        default=1.0,
        metavar="RPS",
        help="the first rate probed (default: 1 req/s; at most --max-rate)",
    )
    parser.add_argument(
        "--max-rate",
        type=float,
        default=MAX_RATE_RPS,
        metavar="RPS",
        help=f"no rate above it is offered: doubling stops there (default: {MAX_RATE_RPS:g} req/s)",
    )
    parser.add_argument(
        "--max-probes", type=int, default=8, metavar="N", help="windows per arm at most (default: 8)"
    )
    parser.add_argument(
        "--resolution",
        type=float,
        default=0.1,
        help="stop when the lowest failing rate is within this fraction of the highest that held "
        "(default 0.1)",
    )
    parser.add_argument(
        "--prompts-per-probe",
        type=int,
        metavar="N",
        help="requests per window (default: load.num_prompts; an attainment of 95%% needs about 60 to be "
        "told from 85%%)",
    )
    parser.add_argument(
        "--allow-mismatch",
        action="store_true",
        help="run even when the machine or the started engine does not match the regime's pins",
    )
    add_override_flags(parser)


def run(args: argparse.Namespace, console: Console) -> int:
    from harness.core.overrides import record as overrides_record
    from harness.derive.capacity import analyze_capacity
    from harness.results.capacity import CAPACITY_FILE, CapacityRecord, SearchSettings
    from harness.results.files import create_exclusive, new_run_id, write_json_atomic
    from harness.run.capacity_search import STOP_RULE, CapacitySearch
    from harness.run.plan import plan_regime, prepare_run

    _check_flags(args)
    overrides = overrides_from(args)
    regime = read_regime(args.regime, overrides)
    if regime.slo is None:
        raise UserError(
            f"{args.regime}: a capacity search needs SLO targets: add slo: {{ttft_ms, tpot_ms, e2e_ms}} "
            "(any of them, in ms) or give them with --set slo.ttft_ms=500"
        )
    if regime.sweep is not None:
        raise UserError(f"{args.regime}: a study (sweep:) has no one capacity; search one of its points")
    plan = plan_regime(args.regime, regime, overrides)  # the workloads, before anything is prepared
    workloads = [w.name for w in plan.workloads]
    workload = args.workload or workloads[0]
    if workload not in workloads:
        raise UserError(f"--workload {workload}: not one of the regime's workloads ({', '.join(workloads)})")
    plan = prepare_run(plan, console, args.allow_mismatch)
    settings = SearchSettings(
        workload=workload,
        start_rps=args.start_rate,
        prompts_per_probe=args.prompts_per_probe or regime.load.num_prompts,
        max_probes=args.max_probes,
        resolution=args.resolution,
        target_pct=regime.slo.target_pct,
        min_rps=args.start_rate / 16,
        max_rps=args.max_rate,
    )
    directory = create_exclusive(args.results_dir / regime.name / f"capacity-{new_run_id()}")
    console.print(f"Capacity directory: [bold]{escape(str(directory))}[/]")
    record = CapacityRecord(
        source_path=str(Path(args.regime).resolve()),
        fingerprint=plan.fingerprint(),  # the regime's, and what existing servers serve
        regime=regime.redacted().model_dump(mode="json"),
        overrides=overrides_record(overrides),
        slo=regime.slo.model_dump(mode="json"),
        settings=settings,
        stop_rule=STOP_RULE,
    )
    write_json_atomic(directory / CAPACITY_FILE, record.model_dump(mode="json"))
    search = CapacitySearch(plan, directory, settings, console)
    probes = {}
    for arm in regime.arms:
        console.rule(f"{arm.name} ({arm.method})")
        probes[arm.name] = search.search(arm)
    analysis = analyze_capacity(record, probes)
    print_capacity(analysis, console)
    console.print(f"Results: {directory}", markup=False)
    return EXIT_OK if all(a.capacity_rps is not None for a in analysis.arms) else EXIT_ENGINE


def _check_flags(args: argparse.Namespace) -> None:
    """The search's flags, before anything is read or started: every rate finite and within the cap."""
    flags = (
        (args.start_rate, "--start-rate"),
        (args.max_rate, "--max-rate"),
        (args.resolution, "--resolution"),
    )
    for value, flag in flags:
        if not math.isfinite(value) or value <= 0:
            raise UserError(f"{flag} must be a finite number > 0 (got {value:g})")
    if args.max_rate > RATE_LIMIT_RPS:
        raise UserError(
            f"--max-rate {args.max_rate:g} req/s: at most {RATE_LIMIT_RPS:g} (past it no client sends on "
            "schedule: the window would be one burst)"
        )
    if args.start_rate > args.max_rate:
        raise UserError(
            f"--start-rate {args.start_rate:g} req/s is above --max-rate ({args.max_rate:g} req/s): "
            "start lower, or raise the cap"
        )
    if args.max_probes < 2:
        raise UserError("--max-probes must be at least 2 (one rate that holds, one that does not)")
    if args.prompts_per_probe is not None and args.prompts_per_probe < 1:
        raise UserError("--prompts-per-probe must be at least 1")


def print_capacity(analysis: CapacityAnalysis, console: Console) -> None:
    """The table and the comparison lines (renders the analysis; computes nothing)."""
    table = Table(title=f"Capacity within {analysis.slo} at {analysis.target_pct:g}% ({analysis.workload})")
    columns = ("arm", "capacity req/s", "fails at req/s", "attainment at capacity [95%]", "failed", "probes")
    for column in (*columns, "stopped"):
        table.add_column(column, justify="left" if column in ("arm", "stopped") else "right")
    for arm in analysis.arms:
        at = arm.at_capacity()
        none = "none found" if arm.probes else "not measured"
        table.add_row(
            arm.arm,
            none if arm.capacity_rps is None else f"{arm.capacity_rps:.3g}",
            "not reached" if arm.ceiling_rps is None else f"{arm.ceiling_rps:.3g}",
            "-" if at is None else f"{at.attainment_pct:.0f}% [{at.low_pct:.0f}, {at.high_pct:.0f}]",
            f"{arm.failed} of {arm.sent}",
            f"{len(arm.probes)} of {arm.max_probes}",
            arm.stop.rule,
        )
    console.print(table)
    for line in stop_lines(analysis) + failure_lines(analysis) + comparison_lines(analysis):
        console.print(escape(line), highlight=False, soft_wrap=True)


def stop_lines(analysis: CapacityAnalysis) -> list[str]:
    """Why each arm's search ended: the rule, the probes it used of its budget, the numbers behind it."""
    return [
        f"{arm.arm}: stopped: {arm.stop.rule} after {len(arm.probes)} of {arm.max_probes} probes: "
        f"{_stop_reason(arm, analysis)}"
        for arm in analysis.arms
    ]


def _stop_reason(arm: ArmCapacity, analysis: CapacityAnalysis) -> str:
    settings, rule = analysis.settings, arm.stop.rule
    lowest = min(arm.probes, key=lambda p: p.rate_rps) if arm.probes else None
    if rule == "resolution":
        bracket = f"[{arm.capacity_rps:.3g}, {arm.ceiling_rps:.3g}) req/s"
        return f"the bracket {bracket} is within {settings.resolution:.0%}"
    if rule == "max-rate":
        cap = f"{arm.capacity_rps:.3g} req/s"
        return f"the SLO held at {cap}, the cap on the rate (--max-rate): it may serve more"
    if rule == "min-rate" and lowest is not None:
        below = f"{settings.min_rps:.3g} req/s"
        return f"no rate held down to {lowest.rate_rps:.3g} req/s; halving again would go below {below}"
    if rule == "missed-without-load" and lowest is not None:
        above = sorted(arm.probes, key=lambda p: p.rate_rps)[1]
        return (
            f"at {lowest.rate_rps:.3g} req/s {lowest.met}/{lowest.sent} met it, {lowest.attainment_pct:.0f}% "
            f"[{lowest.low_pct:.0f}, {lowest.high_pct:.0f}], clearly below {analysis.target_pct:g}% and no "
            f"higher than at {above.rate_rps:.3g} req/s ({above.met}/{above.sent}): the SLO is missed "
            "without load" + (f" ({lowest.failed} of those {lowest.sent} failed)" if lowest.failed else "")
        )
    if rule == "max-probes":
        return _budget_reason(arm, settings.resolution)
    return "the search ended before its rule did (the engine failed or it was interrupted: see above)"


def _budget_reason(arm: ArmCapacity, resolution: float) -> str:
    if arm.capacity_rps is not None and arm.ceiling_rps is not None:
        width = arm.ceiling_rps / arm.capacity_rps - 1
        bracket = f"[{arm.capacity_rps:.3g}, {arm.ceiling_rps:.3g}) req/s"
        return f"the bracket {bracket} is {width:.0%} wide, not {resolution:.0%}: more probes narrow it"
    if arm.capacity_rps is not None:
        return (
            f"it held at every rate probed, up to {arm.capacity_rps:.3g} req/s: start higher (--start-rate)"
        )
    lowest = min(p.rate_rps for p in arm.probes)
    return f"no rate held down to {lowest:.3g} req/s: start lower (--start-rate)"


def failure_lines(analysis: CapacityAnalysis) -> list[str]:
    """Each arm whose requests failed outright (HTTP errors, timeouts): how many, of which kinds.
    They count as SLO misses, so an arm that fails requests is not one that is slow."""
    lines = []
    for arm in analysis.arms:
        if arm.failed:
            kinds = ", ".join(f"{kind}: {count}" for kind, count in arm.errors()) or "kinds not recorded"
            lines.append(
                f"{arm.arm}: {arm.failed} of {arm.sent} requests failed ({kinds}), counted as SLO misses: "
                f"each one's error is in arms/{arm.arm}/samples.jsonl"
            )
    return lines


def comparison_lines(analysis: CapacityAnalysis) -> list[str]:
    """Each speculative arm against the baseline, in words: a ratio only where it means one."""
    base = next((a for a in analysis.arms if a.arm == analysis.baseline), None)
    within = f"within {analysis.slo} at {analysis.target_pct:g}%"
    if base is None or not base.probes:
        return [f"the baseline was not measured: no comparison {within}"]
    if base.capacity_rps is None:
        lowest = min(p.rate_rps for p in base.probes)
        return [f"the baseline met the SLO at no rate probed (down to {lowest:.3g} req/s): no ratio {within}"]
    lines = []
    for found in analysis.comparisons:
        arm = next(a for a in analysis.arms if a.arm == found.arm)
        if found.low is None and found.high is None:
            lines.append(
                f"{found.arm} and the baseline held at every rate probed (up to {arm.capacity_rps:.3g} and "
                f"{base.capacity_rps:.3g} req/s): not comparable {within}; start higher (--start-rate)"
            )
            continue
        low = "..." if found.low is None else f"{found.low - 1:+.0%}"
        high = "..." if found.high is None else f"{found.high - 1:+.0%}"
        serves = f"{found.arm} serves {arm.capacity_rps:.3g} req/s {within}"
        lines.append(
            f"{serves}, the baseline {base.capacity_rps:.3g}: {found.ratio - 1:+.0%} [{low}, {high}] between "
            "the searches' brackets"
        )
    for arm in analysis.arms:
        if arm.arm != analysis.baseline and arm.capacity_rps is None:
            state = "was not measured" if not arm.probes else "met the SLO at no rate probed"
            lines.append(f"{arm.arm} {state}")
    return lines
