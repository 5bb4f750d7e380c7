"""`bench capacity REGIME`: per arm, the highest request rate within the regime's SLO, searched on
the real server, and each speculative arm's capacity against the baseline's."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from harness.capacity_analysis import CapacityAnalysis
from harness.commands.common import EXIT_ENGINE, EXIT_OK, add_override_flags, overrides_from, read_regime
from harness.errors import UserError

NAME = "capacity"
SUMMARY = "search each arm's highest request rate within the regime's SLO (TTFT/TPOT/E2E targets)"
DESCRIPTION = """
The production form of the question: how many more requests a second does speculation let this
deployment serve within its latency targets? For each arm, open-loop windows of a fixed number of
requests (the regime's arrival process, the same schedule for every arm at a rate) are sent at a
rate that doubles from --start-rate while the regime's SLO attainment target (slo.target_pct) holds
and halves while it does not, then is bisected between the highest rate that held and the lowest
that did not until they are within --resolution. Each probe's attainment has a Wilson 95% interval;
each arm's capacity is compared with the baseline's, between the ends of the two brackets.

The regime needs an slo: section. Results go to RESULTS_DIR/<regime>/capacity-<id>/ (capacity.json,
each arm's probes.jsonl and samples.jsonl). No rate is offered above twice the highest that held.
"""
EXAMPLES = """
bench capacity regimes/cpu_default.yaml --set slo.ttft_ms=500 --set slo.tpot_ms=50
bench capacity regimes/h100_tp1_llama31_8b.yaml --start-rate 4 --max-probes 10
bench capacity REGIME --endpoint baseline=http://10.0.0.5:8000 --endpoint ngram_k4=http://10.0.0.6:8000
"""
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
        help="the first rate probed (default: 1 req/s)",
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
    from harness.capacity_analysis import analyze_capacity
    from harness.capacity_search import STOP_RULE, CapacitySearch
    from harness.overrides import record as overrides_record
    from harness.plan import plan_regime, prepare_run
    from harness.results.capacity import CAPACITY_FILE, CapacityRecord, SearchSettings
    from harness.results.files import create_exclusive, new_run_id, write_json_atomic

    overrides = overrides_from(args)
    regime = read_regime(args.regime, overrides)
    if regime.slo is None:
        raise UserError(
            f"{args.regime}: a capacity search needs SLO targets: add slo: {{ttft_ms, tpot_ms, e2e_ms}} "
            "(any of them, in ms) or give them with --set slo.ttft_ms=500"
        )
    if regime.sweep is not None:
        raise UserError(f"{args.regime}: a study (sweep:) has no one capacity; search one of its points")
    for value, flag in ((args.start_rate, "--start-rate"), (args.resolution, "--resolution")):
        if not math.isfinite(value) or value <= 0:
            raise UserError(f"{flag} must be a finite number > 0")
    if args.max_probes < 2:
        raise UserError("--max-probes must be at least 2 (one rate that holds, one that does not)")
    if args.prompts_per_probe is not None and args.prompts_per_probe < 1:
        raise UserError("--prompts-per-probe must be at least 1")
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


def print_capacity(analysis: CapacityAnalysis, console: Console) -> None:
    """The table and the comparison lines (renders the analysis; computes nothing)."""
    table = Table(title=f"Capacity within {analysis.slo} at {analysis.target_pct:g}% ({analysis.workload})")
    for column in ("arm", "capacity req/s", "fails at req/s", "attainment at capacity [95%]", "probes"):
        table.add_column(column, justify="left" if column == "arm" else "right")
    for arm in analysis.arms:
        at = arm.at_capacity()
        none = "none found" if arm.probes else "not measured"
        table.add_row(
            arm.arm,
            none if arm.capacity_rps is None else f"{arm.capacity_rps:.3g}",
            "not reached" if arm.ceiling_rps is None else f"{arm.ceiling_rps:.3g}",
            "-" if at is None else f"{at.attainment_pct:.0f}% [{at.low_pct:.0f}, {at.high_pct:.0f}]",
            str(len(arm.probes)),
        )
    console.print(table)
    for line in comparison_lines(analysis):
        console.print(escape(line), highlight=False, soft_wrap=True)


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
