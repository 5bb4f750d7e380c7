"""The mini-lab table in the terminal: arms x metrics, one table per workload and load level."""

from __future__ import annotations

from typing import Any

from rich.markup import escape

from harness.config.level import LoadLevel
from harness.core.errors import UserError
from harness.core.formats import arm_label, inert, k_text, speedup_text
from harness.core.machine import gpus_text
from harness.core.metrics import METRICS, Metric, shown
from harness.core.probes.acceptance import mean_acceptance_length
from harness.derive.analysis import RunAnalysis
from harness.derive.exactness import FIRST_START_UP
from harness.derive.intervals import Estimate
from harness.derive.verdict import Outcome
from harness.present.cost_text import ceiling_lines, cost_lines
from harness.present.schedule_text import level_verdict, schedule_lines
from harness.present.verdict_text import (
    capacity_lines,
    caveat_text,
    distribution_lines,
    findings_text,
    identical_counts,
    outcome_words,
    published_lines,
    verdict_lines,
)
from harness.present.width import Column, FitTable, wrap
from harness.results.model import ArmSummary, CellMetrics, Summary

# The speedup's definition, where a row shows it: why it may differ from the row's own tok/s ratio.
SPEEDUP_NOTE = (
    "speedup = the geometric mean over rounds of arm tok/s / baseline tok/s in the same round (a "
    "round's drift cancels), with its 95% interval; the tok/s column pools every start-up, so their "
    "ratio differs where the start-ups disagree (marked *)"
)


def outside(text: str) -> str:
    """Text from a dataset, a server or a user (a prompt id, a category) for a table's cell, which
    rich reads as markup: its markup escaped and its control characters ``inert``, so that an id
    carrying an ESC sequence is shown, never acted on by the terminal."""
    return escape(inert(text))


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _speedup(estimate: Estimate | None, marked: bool = False, outcome: str | None = None) -> str:
    """A speedup with its interval, coloured by what the interval decides (never by the point):
    ``outcome``, the window's reading of it over its arms at once, where given."""
    if estimate is None:
        return "-"
    colour = {"pays": "green", "loses": "red"}.get(outcome or estimate.verdict, "")
    text = speedup_text(estimate.point, estimate.low, estimate.high) + ("*" if marked else "")
    return f"[{colour}]{text}[/]" if colour else text


def _header(metric: Metric) -> str:
    """A registry label as a two-line header, its last word below (``TTFT\np50``, ``same\n%``)."""
    head, _, tail = metric.label.rpartition(" ")
    return f"{head}\n{tail}" if head else tail


def measured(summary: Summary) -> set[str]:
    """The conditions of ``Metric.shown`` this run meets, open loop aside (a table's own level)."""
    found = {"slo"} if summary.slo else set()
    if any(c.power_source for c in summary.cells):
        found.add("power")
    if any(c.copy_share_pct is not None for c in summary.cells):
        found.add("copy")
    if any(c.turn is not None for c in summary.cells):
        found.add("turns")  # conversation workloads: how much of each turn the prefix cache served
    return found


def metric_text(metric: Metric, cell: CellMetrics, analysis: RunAnalysis) -> str:
    """One metric of one cell as the terminal shows it, rich markup included."""
    if metric.baseline_text is not None and cell.method == "baseline":
        return metric.baseline_text
    value = metric.value(cell)
    if metric.ratio:
        if cell.arm == analysis.summary.baseline_arm:
            return "1.00x" if value is not None else "-"
        return _speedup(analysis.estimate(cell), analysis.pooled_ratio_differs(cell), analysis.outcome(cell))
    text = metric.format(value)
    if metric.flag and getattr(cell, metric.flag[0], False):
        return f"[red]{text} {metric.flag[1]}[/]"
    return text


def minilab_tables(analysis: RunAnalysis) -> list[FitTable]:
    """One table per (workload, load level), rows in the regime's arm order, the metric columns
    the registry's (``harness.core.metrics.shown``); stacked at print time where the console is narrow."""
    tables, summary = [], analysis.summary
    conditions = measured(summary)
    for workload, level in summary.window_keys():
        rows = [c for c in summary.cells if (c.workload, c.level) == (workload, level)]
        metrics = shown("terminal", conditions | ({"open_loop"} if level.request_rate is not None else set()))
        first = rows[0]
        table = FitTable(
            inert(f"{workload} ({first.category}, {first.prompt_format} prompts) @ {level.label()}; ")
            + "times in ms"
            + (f"; SLO {summary.slo.describe()}, goodput in requests/s" if summary.slo else ""),
            keys=[Column("arm", text=True), Column("method", text=True)],
            columns=[Column("ok"), *(Column(_header(m)) for m in metrics)],
        )
        for row in rows:
            table.add_row(
                row.arm,
                arm_label(row.method, row.num_speculative_tokens),
                f"{row.requests_ok}/{row.requests_total}",
                *(metric_text(m, row, analysis) for m in metrics),
            )
        tables.append(table)
    return tables


def category_table(analysis: RunAnalysis) -> FitTable | None:
    """Speculative arms per category: tau (over all concurrency levels), exactness, and speedup with
    its interval at each level (the same model as a cell's); categories in ``analysis.category_order``."""
    rows = [r for r in analysis.summary.categories if r.method != "baseline"]
    if not rows:
        return None
    levels = sorted({r.level for r in rows}, key=LoadLevel.order)
    arms = list(dict.fromkeys(r.arm for r in rows))
    table = FitTable(
        f"per category (ordered by {arms[0]} tau; tau over all load levels)",
        keys=[Column("category", text=True), Column("arm", text=True)],
        columns=[Column("tau"), Column("same\n%"), *(Column(f"speedup\n{lv.short()}") for lv in levels)],
    )
    for category in analysis.category_order:
        for arm in arms:
            pooled = analysis.category_pool(category, arm)
            if pooled is None:
                continue
            tau, identical = pooled
            members = {r.level: r for r in rows if (r.category, r.arm) == (category, arm)}
            table.add_row(
                outside(category),
                arm,
                _fmt(tau, ".2f"),
                _fmt(identical, ".0f"),
                *(
                    _speedup(
                        analysis.category_estimate(members[level]),
                        outcome=analysis.category_outcome(members[level]),
                    )
                    if level in members
                    else "-"
                    for level in levels
                ),
            )
    return table


def drafter_lines(summary: Summary) -> list[str]:
    """One line per arm with a drafter: its tau belongs to that drafter as much as to the method
    (wrapped to the terminal)."""
    return [_wrapped(f"{a.name}: drafter {drafter_note(a.drafter)}") for a in summary.arms if a.drafter]


def _wrapped(line: str) -> str:
    """A line of terminal prose wrapped to the terminal's width, its indent kept."""
    body = line.lstrip(" ")
    return wrap(body, indent=line[: len(line) - len(body)])


def drafter_note(drafter: dict[str, Any]) -> str:
    """A drafter's label and reference, and for one trained here how many of the measured prompts
    it was trained on (0 unless someone pointed a regime at its training prompts)."""
    text = f"{drafter['label']} ({drafter['reference']})"
    held_out = drafter.get("held_out")
    if held_out:
        text += (
            f"; trained on {held_out['trained_on']} of the {held_out['measured_prompts']} measured prompts"
        )
        if held_out["trained_on"]:
            text += " (its tau is flattered: those prompts are not held out)"
    return text


def failed_arms(summary: Summary) -> list[ArmSummary]:
    return [arm for arm in summary.arms if arm.status != "ok"]


def exactness_table(summary: Summary) -> FitTable | None:
    """Per arm: share of prompts whose greedy output is identical to the baseline's, and why not."""
    section = summary.exactness
    if not section.applicable:
        return None
    blocks = list(section.arms.items())
    floor = section.noise_floor
    # the noise floor: the baseline's later start-ups against its first (issue 81), or, in a run that
    # made the full reference pass, that 2nd pass against the first
    start_ups = floor is not None and floor.reference.endswith(FIRST_START_UP)
    if floor:
        name = "its later start-ups" if start_ups else "2nd pass"
        blocks.insert(0, (f"{summary.baseline_arm} ({name})", floor))
    mode = ""
    if section.compile_mode:
        mode = f"; every server {section.compile_mode}" + ("" if start_ups else ", the 2nd pass's too")
    table = FitTable(
        f"greedy exactness vs {summary.baseline_arm}, same prompt and concurrency (near tie: top-2 margin < "
        f"{section.near_tie_margin} nats{mode})",
        keys=[Column("arm", text=True)],
        columns=[
            *(Column(h) for h in ("pairs", "identical\n%", "near_tie\n%", "diverged\n%", "unknown\n%")),
            Column("first divergences\nprompt@position(status)", wraps=True),
        ],
    )
    for name, block in blocks:
        diverged = [e for e in block.prompts if e.status != "identical"]
        firsts = [outside(f"{e.prompt_id}@{e.position}({e.status})") for e in diverged]
        table.add_row(
            name,
            str(block.compared),
            *(
                _fmt(getattr(block, f"{status}_pct"), ".0f")
                for status in ("identical", "near_tie", "diverged", "unknown")
            ),
            ", ".join(firsts[:4]) + (f" +{len(firsts) - 4} more" if len(firsts) > 4 else ""),
        )
    return table


def precision_line(cells: list[CellMetrics]) -> str | None:
    """Adaptive repeats: the precision reached and what it cost, in one line."""
    adaptive = [c for c in cells if c.precision_target is not None]
    if not adaptive:
        return None
    extra_min = sum(c.extra_repeat_s for c in adaptive) / 60
    reached = [c for c in adaptive if c.rel_half_width is not None and c.rel_half_width <= c.precision_target]
    widths = sorted(c.rel_half_width for c in adaptive if c.rel_half_width is not None)
    median = f"{100 * widths[len(widths) // 2]:.1f}%" if widths else "-"
    return (
        f"adaptive repeats: {len(reached)} of {len(adaptive)} cells reached their target half-width "
        f"(+-{100 * adaptive[0].precision_target:g}%; median reached {median}); the repeats beyond the "
        f"minimum cost {extra_min:.1f} engine-minutes"
    )


def markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A GitHub-flavoured Markdown table, pipes in cells escaped."""

    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    lines = ["| " + " | ".join(cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]


# The lab's deliverable: {arms} x {tau, tok/s, TPOT, $/Mtok, outputs identical?} per workload.
LAB_COLUMNS = ("speedup", "verdict", "tau", "tok/s", "TPOT p50 ms", "$/Mtok", "identical")
OUTCOME_WORD = {  # the lab table's verdict column: one or two words
    Outcome.PAYS: "pays",
    Outcome.LOSES: "loses",
    Outcome.EQUIVALENT: "no difference",
    Outcome.INDISTINGUISHABLE: "too noisy to tell",
    Outcome.UNVERIFIED: "unverified",
    Outcome.NO_ARM: "",
}
_LAB_METRICS = (
    "tau",
    "output_tok_s",
    "tpot_ms_p50",
    "usd_per_mtok",
)  # the first four, formatted by the registry


def lab_level(summary: Summary, concurrency: int | LoadLevel | None = None) -> LoadLevel:
    """The load level the lab table shows: the one asked for (a closed-loop concurrency, or a
    level), else the first measured (the lowest concurrency, else the lowest rate)."""
    levels = summary.levels()
    if not levels:
        raise UserError("no arm measured anything in this run: there is no lab table to show")
    if concurrency is None:
        return levels[0]
    level = concurrency if isinstance(concurrency, LoadLevel) else LoadLevel(concurrency)
    if level not in levels:
        raise UserError(
            f"{level.label()} was not measured in this run (levels: {', '.join(lv.label() for lv in levels)})"
        )
    return level


def _identical_cell(summary: Summary, cell: CellMetrics) -> str:
    if cell.arm == summary.baseline_arm:
        return "reference"
    counts = identical_counts(cell)
    if counts is None:
        return "-"
    same, near, compared = counts
    return f"{same}/{compared}" + (f" ({near} near tie{'s' if near > 1 else ''})" if near else "")


def _lab_verdict(analysis: RunAnalysis, cell: CellMetrics) -> str:
    """The window's verdict word on the row of the arm it is about; the baseline's row says whether
    it is the one to deploy."""
    found = analysis.verdict(cell.workload, cell.level)
    if found is None:
        return "-"
    if cell.arm == analysis.summary.baseline_arm:
        return "deploy" if found.deploy == cell.arm and found.best is not None else ""
    if found.best is None or found.best.arm != cell.arm:
        return ""
    return outcome_words(found)


def lab_rows(analysis: RunAnalysis, level: LoadLevel) -> tuple[list[str], list[list[str]]]:
    """One row per arm, the workloads side by side (the lab's columns for each)."""
    summary = analysis.summary
    workloads = list(dict.fromkeys(c.workload for c in summary.cells))
    header = ["arm"] + [f"{w}: {column}" for w in workloads for column in LAB_COLUMNS]
    rows = []
    for arm in summary.arms:
        row = [arm.name]
        for workload in workloads:
            cell = summary.cell(arm.name, workload, level)
            if cell is None:
                row += ["-"] * len(LAB_COLUMNS)
                continue
            speed = "1.00x" if cell.arm == summary.baseline_arm else _plain(analysis.estimate(cell))
            row += (
                [speed, _lab_verdict(analysis, cell)]
                + [metric_text(METRICS[name], cell, analysis) for name in _LAB_METRICS]
                + [_identical_cell(summary, cell)]
            )
        rows.append(row)
    return header, rows


def _plain(estimate: Estimate | None) -> str:
    return "-" if estimate is None else speedup_text(estimate.point, estimate.low, estimate.high)


def lab_markdown(analysis: RunAnalysis, concurrency: int | LoadLevel | None = None) -> str:
    summary = analysis.summary
    level = lab_level(summary, concurrency)
    header, rows = lab_rows(analysis, level)
    title = f"{summary.regime_name} run {summary.run_id}, {level.label()}"
    note = (
        "speedup with its 95% interval; verdict on the row of the arm it is about; TPOT p50 in ms; "
        "identical: prompts whose greedy token ids equal the baseline's (near ties: numerics)"
    )
    return "\n".join([f"**{title}** ({note})", "", *markdown_table(header, rows)]) + "\n"


def answer_lines(analysis: RunAnalysis) -> list[str]:
    """The detail beneath the tables (capacity, published figures, the findings paragraph, step
    costs, backends), then the answer: the verdict per window and the run's caveats, last, where the
    eye lands when a run ends (plain text, rich markup escaped by the caller), each wrapped to the
    terminal's width."""
    summary = analysis.summary
    lines = capacity_lines(analysis)
    lines += published_lines(analysis)
    lines += distribution_lines(summary)
    if analysis.findings:
        lines += ["Findings: " + " ".join(findings_text(analysis.findings))]
    lines += cost_lines(analysis.cost) + ceiling_lines(analysis.ceiling)
    for line in (
        backend_line(summary),
        draft_counting_line(summary),
        verification_line(summary),
        *acceptance_check_lines(summary),
        past_stop_line(summary),
        cpu_line(summary),
    ):
        if line:
            lines.append(line)
    lines += verdict_lines(analysis)
    lines += [f"  caveat: {caveat_text(c)}" for c in analysis.caveats]
    return [_wrapped(line) for line in lines]


def cpu_line(summary: Summary) -> str | None:
    """Who used the CPU during the windows (the most of any cell), and which cells are flagged."""
    cells = [c for c in summary.cells if c.engine_cpu_cores is not None]
    if not cells:
        return None

    def most(name: str) -> float:
        return max(getattr(c, name) or 0.0 for c in cells)

    flagged = [f"{c.arm} {c.workload} {c.level.short()}" for c in cells if c.noisy_neighbour or c.client_busy]
    watched = [c for c in summary.cells if c.gpu_other_processes is not None]
    gpu = ""
    if watched:
        sm = [c.gpu_others_sm_pct for c in watched if c.gpu_others_sm_pct is not None]
        count = max(c.gpu_other_processes or 0 for c in watched)
        gpu = f"Other processes on the engine's GPUs: at most {count}" + (
            f", using at most {max(sm):.0f}% of the SMs. " if sm else " (SM use per process not reported). "
        )
    return (
        f"CPU during the windows, in cores (the most of any cell): engine {most('engine_cpu_cores'):.2f}, "
        f"harness client {most('client_cpu_cores'):.2f}, other processes {most('others_cpu_cores'):.2f}; "
        f"hypervisor steal {100 * most('steal_share'):.0f}%. "
        + gpu
        + (
            f"Flagged (busy neighbour or busy client): {', '.join(flagged)}."
            if flagged
            else "No window flagged."
        )
    )


def backend_text(arm: ArmSummary) -> str:
    backend = arm.attention_backend
    if backend is None or backend.target is None:
        return "not reported"
    return backend.target + (f" (drafter {backend.drafter})" if backend.drafter else "")


def backend_line(summary: Summary) -> str | None:
    """The attention backend each arm's engine selected, in one line (once when all agree)."""
    reported = [a for a in summary.arms if a.attention_backend is not None]
    if not reported:
        return None
    texts = {a.name: backend_text(a) for a in summary.arms}
    sources = sorted({a.attention_backend.source for a in reported if a.attention_backend})
    if len(set(texts.values())) == 1:
        body = f"{next(iter(texts.values()))} for every arm"
    else:
        body = ", ".join(f"{name} {text}" for name, text in texts.items())
    return f"Attention backend: {body} ({'; '.join(sources)})."


def draft_counting_line(summary: Summary) -> str | None:
    """How each speculative arm's engine counted a draft (tau's denominator), once when all agree:
    ngram's tau differs between engines and model runners for the same outputs."""
    arms = [a for a in summary.arms if a.method != "baseline" and a.draft_counting is not None]
    if not arms:
        return None
    kinds = {a.name: a.draft_counting.semantics for a in arms if a.draft_counting}
    sources = sorted({a.draft_counting.source for a in arms if a.draft_counting})
    if len(set(kinds.values())) == 1:
        body = f"{next(iter(kinds.values()))} for every speculative arm"
    else:
        body = ", ".join(f"{name} {kind}" for name, kind in kinds.items())
    return (
        f"Drafts counted as (tau's denominator): {body} ({'; '.join(sources)}); tok/fwd (output tokens per "
        "target forward pass) does not depend on it."
    )


def acceptance_check_lines(summary: Summary) -> list[str]:
    """The cells whose acceptance counters fail a consistency check (none, as a rule: shown only
    when one fails)."""
    return [
        f"Acceptance counters inconsistent: {c.arm} {c.workload} @ {c.level.label()}: {problem}."
        for c in summary.cells
        for problem in c.acceptance_checks
    ]


def past_stop_line(summary: Summary) -> str | None:
    """Per speculative arm, the drafts its counters accepted past requests' stops (counted in tau,
    never output; ``probes.acceptance.ACCEPTED_PAST_STOP``) and tau without them, over its cells."""
    totals: dict[str, list[float]] = {}
    for cell in summary.cells:
        if cell.accepted_past_stop is not None and cell.drafts > 0:
            total = totals.setdefault(cell.arm, [0.0, 0.0, 0.0])
            total[0] += cell.accepted_past_stop
            total[1] += cell.accepted_tokens
            total[2] += cell.drafts
    parts = []
    for arm, (past, accepted, drafts) in totals.items():
        with_them = mean_acceptance_length(drafts, accepted)
        without = mean_acceptance_length(drafts, accepted - past)
        share = 100 * past / accepted if accepted else 0.0
        parts.append(
            f"{arm} {past:.0f} of {accepted:.0f} accepted ({share:.0f}%; tau {with_them:.2f}, "
            f"{without:.2f} without them)"
        )
    if not parts:
        return None
    return (
        "Drafts accepted past a request's stop (counted in tau, never output; at least, from the stream): "
        + ", ".join(parts)
        + "."
    )


def verification_line(summary: Summary) -> str | None:
    """How each speculative arm's drafts were verified and sampled, once when all agree: block
    verification accepts more than token-by-token rejection, and a greedy draft is not a sample."""
    arms = [a for a in summary.arms if a.verification is not None]
    if not arms:
        return None
    texts = {a.name: f"{a.verification} verification, {a.draft_sampling} draft sampling" for a in arms}
    if len(set(texts.values())) == 1:
        body = f"{next(iter(texts.values()))} for every speculative arm"
    else:
        body = ", ".join(f"{name} {text}" for name, text in texts.items())
    return f"Drafts verified and sampled: {body} (rejection_sample_method, draft_sample_method)."


def power_line(summary: Summary) -> str | None:
    """Which GPUs the power and energy columns are of (the servers' own), where the run recorded them."""
    if not summary.power_gpus:
        return None
    gpus = gpus_text([g.model_dump() for g in summary.power_gpus])
    return _wrapped(f"Power and energy (W, J, J/token): NVML on the servers' own GPUs only, {gpus}.")


def timing_line(summary: Summary) -> str | None:
    """Where the run's wall time went, and what the harness itself cost on top of the engine."""
    timing = summary.timing
    if timing is None or timing.overhead_ratio is None:
        return None
    wall, startup, measured = (timing.total(n) for n in ("wall_s", "startup_s", "measured_s"))
    other = wall - startup - measured
    resumed = f" over {len(timing.invocations)} invocations" if len(timing.invocations) > 1 else ""
    prepare, warmup = timing.total("prepare_s"), timing.total("warmup_s")
    release = timing.total("gpu_release_s")  # waiting for stopped servers' GPU memory to be freed
    freed = f"waiting for GPU memory to be freed {release:.0f} s, " if release >= 0.5 else ""
    return _wrapped(
        f"Run time{resumed}: {wall / 60:.1f} min = {startup / 60:.1f} min of server start-ups + "
        f"{measured / 60:.1f} min measuring + {other / 60:.1f} min else (preparation {prepare:.0f} s, "
        f"warm-up {warmup:.0f} s, {freed}scrapes and shutdowns): {timing.overhead_ratio:.2f}x start-ups + "
        "measuring."
    )


def _ratio(found: Any) -> str:
    return "-" if found is None else speedup_text(found.point, found.low, found.high)


def schedule_sections(analysis: RunAnalysis) -> list[dict[str, Any]]:
    """Each scheduled arm against every static K of its method and the baseline, per level, with the
    K its schedule gives there and the drafted tokens per draft the engine's counters saw: a title,
    the header, the rows and the conclusions (the terminal's tables and the report's)."""
    out = []
    for check in analysis.schedule_checks:
        statics = sorted({s for level in check.levels for s in level.against})
        schedule = ", ".join(f"{a}-{b}: {k_text(k, 'off')}" for a, b, k in check.schedule)
        source = f" from {check.source}" if check.source else ""
        rows = [
            [
                level.workload,
                str(level.concurrency),
                str(level.scheduled_k),
                _fmt(level.drafted_per_draft, ".2f"),
                _ratio(level.speedup),
                *(_ratio(level.against.get(s)) for s in statics),
                level_verdict(level),
            ]
            for level in check.levels
        ]
        out.append(
            {
                "title": f"{check.arm}: K per batch size {schedule}{source}; against each static K (same "
                "start-ups, 95%, the baseline cancels)",
                "header": ["workload", "conc.", "K scheduled", "drafted per draft", "speedup"]
                + [f"vs {s}" for s in statics]
                + ["verdict"],
                "rows": rows,
                "lines": schedule_lines(check),
            }
        )
    return out


def section_tables(
    sections: list[dict[str, Any]], key_text: tuple[bool, ...], prose_last: bool
) -> list[FitTable | str]:
    """Sections (a title, a header, rows, conclusions) as terminal tables, each followed by its
    lines: the first ``len(key_text)`` columns repeat when the table is stacked (each text or a
    right-aligned value); ``prose_last``: the last column is text that may wrap (a verdict)."""
    keys = len(key_text)
    out: list[FitTable | str] = []
    for section in sections:
        header = section["header"]
        values = header[keys:-1] if prose_last else header[keys:]
        table = FitTable(
            section["title"],
            keys=[Column(h, text=text) for h, text in zip(header, key_text, strict=False)],
            columns=[Column(h.replace(" ", "\n", 1)) for h in values]
            + ([Column(header[-1], text=True, wraps=True)] if prose_last else []),
        )
        for row in section["rows"]:
            table.add_row(*row)
        out.append(table)
        out += [f"  {line}" for line in section["lines"]]
    return out


def schedule_tables(analysis: RunAnalysis) -> list[FitTable | str]:
    """``schedule_sections`` for the terminal."""
    return section_tables(schedule_sections(analysis), key_text=(True, False), prose_last=True)
