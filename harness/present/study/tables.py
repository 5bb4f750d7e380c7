"""What a study prints and writes for design docs: the recommendation per workload and load level
(one column per point), the break-even points, the best K, and the flips; as rich tables for the
terminal and as Markdown."""

from __future__ import annotations

import json

from rich import box
from rich.markup import escape
from rich.table import Table

from harness.core.formats import inert, k_text, speedup_text
from harness.derive.study.analysis import BestK, BreakEven, Recommendation
from harness.derive.study.collect import StudyResults
from harness.derive.study.policy import RULE as POLICY_RULE
from harness.present.cost_text import cost_lines
from harness.present.table import markdown_table, precision_line
from harness.present.verdict_text import findings_text
from harness.results.model import CellMetrics
from harness.results.study.policy_file import POLICY_YAML, PolicySchedule

# what each table's numbers are, said once for the terminal titles and the Markdown
RECOMMENDATION_RULE = (
    "the fastest speculative arm, deployed only when its speedup interval lies above 1 after "
    "correcting for the number of arms it was picked from (every candidate's interval at once)"
)
BREAK_EVEN_RULE = (
    "where each arm's speedup crosses 1, interpolated on log2 concurrency; the 95% set pairs the "
    "load levels by server start-up (open-ended where the data cannot place it)"
)
BEST_K_RULE = "the K values that cannot be told from the best: Hsu's multiple comparisons with the best, 95%"


def _short(rec: Recommendation | None) -> str:
    if rec is None or rec.best_arm is None:
        return "-"
    if rec.arm is None:
        return f"none ({rec.best_arm} {speedup_text(rec.speedup.point)}, {rec.status()})"  # type: ignore[union-attr]
    saving = f", -{rec.saving_pct:.0f}% $/Mtok" if rec.saving_pct is not None else ""
    return f"{rec.arm} {speedup_text(rec.speedup.point)} ({rec.status()}){saving}"  # type: ignore[union-attr]


def recommendation_rows(study: StudyResults) -> tuple[list[str], list[list[str]]]:
    """Header and rows: workload, concurrency, then one column per point."""
    recs = {(r.point, r.workload, r.concurrency): r for r in study.recommendations()}
    points = [p.id for p in study.record.points if p.id in study.summaries]
    keys = sorted({(w, c) for (_, w, c) in recs}, key=lambda k: (k[0], k[1]))
    header = ["workload", "concurrency"] + [f"{p}: {study.label(p)}" for p in points]
    rows = [[w, str(c)] + [_short(recs.get((p, w, c))) for p in points] for w, c in keys]
    return header, rows


POINT_RULE = (
    "each point's cells as measured: prompt tokens the engine counted, tau, output tokens per target "
    "forward, TPOT p50 and the speedup with its 95% interval (the arm's own, uncorrected)"
)


def _number(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _speedup_text(cell: CellMetrics) -> str:
    if cell.speedup is None:
        return "-"
    stored = cell.estimate
    return speedup_text(cell.speedup, stored.low if stored else None, stored.high if stored else None)


def point_rows(study: StudyResults) -> tuple[list[str], list[list[str]]]:
    """Header and rows: per point, workload, load level and arm, what moves along an axis (a longer
    context: more prompt tokens, a slower TPOT, another tau)."""
    header = ["point", "workload", "level", "arm", "prompt tok", "tau", "tok/fwd", "TPOT p50", "speedup"]
    rows = []
    for point in (p.id for p in study.record.points if p.id in study.summaries):
        cells = study.summaries[point].cells  # in the regime's arm order
        workloads = list(dict.fromkeys(c.workload for c in cells))
        for cell in sorted(cells, key=lambda c: (workloads.index(c.workload), c.level.order())):
            rows.append(
                [
                    f"{point}: {study.label(point)}",
                    cell.workload,
                    cell.level.short(),
                    cell.arm,
                    _number(cell.prompt_tokens_mean, ".0f"),
                    _number(cell.tau, ".2f"),
                    _number(cell.tokens_per_forward, ".2f"),
                    _number(cell.tpot_ms_p50, ".1f"),
                    _speedup_text(cell),
                ]
            )
    return header, rows


def break_even_rows(study: StudyResults) -> tuple[list[str], list[list[str]]]:
    found: list[BreakEven] = sorted(study.break_evens(), key=lambda b: (b.point, b.workload, b.arm))
    return ["point", "workload", "arm", "break-even"], [[b.point, b.workload, b.arm, b.text()] for b in found]


def best_k_rows(study: StudyResults) -> tuple[list[str], list[list[str]]]:
    found: list[BestK] = sorted(study.best_ks(), key=lambda b: (b.point, b.family, b.workload, b.concurrency))
    rows = [
        [
            b.point,
            b.family,
            b.workload,
            str(b.concurrency),
            b.text(),
            ", ".join(f"{k_text(k)}: {speedup_text(s)}" for k, s in b.by_k),
        ]
        for b in found
    ]
    return ["point", "family", "workload", "concurrency", "best K", "all K"], rows


def schedule_text(schedule: PolicySchedule) -> str:
    """``1-2: K=4, 3-1024: off``."""
    return ", ".join(f"{a}-{b}: {k_text(k, 'off')}" for a, b, k in schedule.ranges)


def _level_text(schedule: PolicySchedule) -> str:
    return "; ".join(f"{level.concurrency}: {level.why}" for level in schedule.levels)


def _boundaries_text(schedule: PolicySchedule) -> str:
    if not schedule.boundaries:
        return "-"
    return "; ".join(
        f"{b.last}|{b.last + 1} "
        + (f"at the break-even {b.break_even:.1f}" if b.how == "break-even" else "interpolated")
        + f" (measured {b.between[0]} and {b.between[1]})"
        for b in schedule.boundaries
    )


def _workload(schedule: PolicySchedule) -> str:
    if schedule.workload != "mix":
        return schedule.workload
    return "mix (" + ", ".join(f"{w} {v:.2f}" for w, v in schedule.weights.items()) + ")"


def policy_rows(study: StudyResults) -> tuple[list[str], list[list[str]]]:
    rows = [
        [s.point, s.family, _workload(s), schedule_text(s), _level_text(s), _boundaries_text(s)]
        for s in study.policy_file().schedules
    ]
    return ["point", "family", "workload", "K per batch size", "per measured level", "boundaries"], rows


def engine_lines(study: StudyResults) -> list[str]:
    """Each schedule's engine configuration, as the line to launch it with."""
    out = []
    for s in study.policy_file().schedules:
        where = f"{s.point} {s.family} {s.workload}"
        if s.speculative_config is not None:
            out.append(f"{where}: --speculative-config '{json.dumps(s.speculative_config, sort_keys=True)}'")
        if s.adaptive_config is not None:
            out.append(f"{where}: {s.adaptive_config_file}: {json.dumps(s.adaptive_config, sort_keys=True)}")
        if s.note:
            out.append(f"{where}: {s.note}")
    return out


def _rich(title: str, header: list[str], rows: list[list[str]]) -> Table:
    table = Table(
        title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True
    )
    for column in header:
        table.add_column(escape(inert(column)), overflow="fold")
    for row in rows:
        table.add_row(*(escape(inert(cell)) for cell in row))
    return table


def caveats(study: StudyResults) -> list[str]:
    """What the reader must know before trusting the tables: points whose job failed (the
    scheduler's reason) and a study whose points ran on different machines."""
    out = [
        f"point {point} has no complete run: its job {reason}"
        for point, reason in study.failed_jobs().items()
    ]
    machines = study.machines()
    if len(set(machines.values())) > 1:
        where = "; ".join(f"{p}: {m}" for p, m in machines.items())
        out.append(f"the points ran on different machines ({where}): compare points only where they match")
    return out


def terminal_tables(study: StudyResults) -> list[Table | str]:
    """The study's answer, in the order a reader asks for it."""
    out: list[Table | str] = [
        _rich(
            f"recommendation per workload and load, per point: {RECOMMENDATION_RULE}",
            *recommendation_rows(study),
        ),
        _rich(f"break-even concurrency: {BREAK_EVEN_RULE}", *break_even_rows(study)),
        _rich(f"per point: {POINT_RULE}", *point_rows(study)),
    ]
    header, rows = best_k_rows(study)
    if rows:
        out.append(_rich(f"best K per method family ({BEST_K_RULE})", header, rows))
    header, rows = policy_rows(study)
    if rows:
        out.append(_rich(f"speculation policy ({POLICY_YAML}): {POLICY_RULE}", header, rows))
        out += [f"  {escape(inert(line))}" for line in engine_lines(study)]
    flips = study.flips()
    out.append(
        "flips between points that differ in one axis (decided on both sides):"
        if flips
        else "flips: none between the points measured"
    )
    out += [f"  - {escape(inert(f.text))}" for f in flips]
    precision = precision_line([c for s in study.summaries.values() for c in s.cells])
    if precision:
        out.append(precision)
    if study.missing:
        out.append(
            f"points without results yet: {', '.join(study.missing)} (bench run --resume {study.root})"
        )
    out += [f"[yellow]caveat[/]: {escape(inert(line))}" for line in caveats(study)]
    return out


def cost_section(study: StudyResults) -> list[str]:
    """Per point, why a larger K stopped paying and its step costs with break-even tau
    (docs/cost-model.md); nothing where no engine counted its steps."""
    lines = []
    for point, model in study.cost_models().items():
        why, costs = findings_text(study.k_limits()[point]), cost_lines(model)
        if why or costs:
            lines += [
                f"### {point}: {study.label(point)}",
                "",
                *why,
                "",
                *[f"    {line}" for line in costs],
                "",
            ]
    return ["## Step cost and break-even acceptance", "", *lines] if lines else []


def markdown(study: StudyResults) -> str:
    """The same tables for a design doc (``analysis.md`` in the study directory)."""
    record = study.record
    lines = [f"# Study {record.name}: {study.root.name}", ""]
    lines += [
        f"Points: {len(record.points)} ({', '.join(f'{p.id}: {study.label(p.id)}' for p in record.points)}); "
        f"arm families: {', '.join(sorted(set(record.families.values())))}.",
        "",
    ]
    lines += ["## Recommendation", "", f"Per point: {RECOMMENDATION_RULE}.", ""]
    lines += markdown_table(*recommendation_rows(study)) + [""]
    lines += ["## Break-even concurrency", "", BREAK_EVEN_RULE[0].upper() + BREAK_EVEN_RULE[1:] + ".", ""]
    lines += markdown_table(*break_even_rows(study)) + [""]
    lines += ["## Per point", "", POINT_RULE[0].upper() + POINT_RULE[1:] + ".", ""]
    lines += markdown_table(*point_rows(study)) + [""]
    header, rows = best_k_rows(study)
    if rows:
        lines += ["## Best K", "", BEST_K_RULE[0].upper() + BEST_K_RULE[1:] + ".", ""]
        lines += markdown_table(header, rows) + [""]
    header, rows = policy_rows(study)
    if rows:
        lines += [
            "## Speculation policy",
            "",
            POLICY_RULE[0].upper() + POLICY_RULE[1:] + f" ({POLICY_YAML}).",
            "",
        ]
        lines += markdown_table(header, rows) + [""]
        lines += [f"- `{line}`" for line in engine_lines(study)] + [""]
    lines += cost_section(study)
    lines += ["## Flips", "", "Only where the decision is made by the data on both sides.", ""] + (
        [f"- {f.text}" for f in study.flips()] or ["None between the points measured."]
    )
    precision = precision_line([c for s in study.summaries.values() for c in s.cells])
    if precision:
        lines += ["", precision[0].upper() + precision[1:] + "."]
    if study.missing:
        lines += ["", f"Points without results yet: {', '.join(study.missing)}."]
    lines += [f"- Caveat: {line}." for line in caveats(study)]
    return "\n".join(lines) + "\n"
