"""The mini-lab table in the terminal: arms x metrics, one table per workload and load level."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.table import Table

from harness import pooling
from harness.errors import UserError
from harness.findings import findings
from harness.metrics import METRICS
from harness.regime import LoadLevel
from harness.results.model import ArmSummary, CellMetrics, Summary
from harness.verdict import (
    capacity_lines,
    distribution_lines,
    identical_counts,
    interval_note,
    run_caveats,
    window_verdicts,
)


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _speedup(value: float | None) -> str:
    if value is None:
        return "-"
    colour = "green" if value > 1.0 else ("red" if value < 1.0 else "")
    text = f"{value:.2f}x"
    return f"[{colour}]{text}[/]" if colour else text


# The mini-lab's metric columns, by registry name (headers from the registry's labels).
_CELL_COLUMNS = (
    "tau",
    "tokens_per_forward",
    "output_tok_s",
    "speedup",
    "ttft_ms_p50",
    "tpot_ms_p50",
    "tpot_ms_p90",
    "usd_per_mtok",
)


def _header(name: str) -> str:
    """A registry label as a two-line header where it has a qualifier (``TTFT\\np50``)."""
    label = METRICS[name].label
    return label.replace(" ", "\n") if name.endswith(("_p50", "_p90")) else label


# with SLO targets in the regime, two more: the share of requests within them and the goodput
_SLO_COLUMNS = ("slo_pct", "goodput_rps")

_FORMATS = {
    "slo_pct": ".0f",
    "goodput_rps": ".2f",
    "tau": ".2f",
    "tokens_per_forward": ".2f",
    "output_tok_s": ".1f",
    "ttft_ms_p50": ".0f",
    "tpot_ms_p50": ".1f",
    "tpot_ms_p90": ".1f",
    "usd_per_mtok": ".2f",
}


def _table(title: str) -> Table:
    return Table(
        title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True
    )


def minilab_tables(summary: Summary) -> list[Table]:
    """One rich table per (workload, load level), rows in the regime's arm order."""
    tables = []
    columns = _CELL_COLUMNS + (_SLO_COLUMNS if summary.slo else ())
    for workload, level in summary.window_keys():
        rows = [c for c in summary.cells if (c.workload, c.level) == (workload, level)]
        open_loop = level.request_rate is not None
        first = rows[0]
        # light borders: the table fits an 80-column terminal
        table = _table(
            f"{workload} ({first.category}, {first.prompt_format} prompts) @ {level.label()}; "
            "times in ms" + (f"; SLO {summary.slo.describe()}, goodput in requests/s" if summary.slo else "")
        )
        headers = ["arm", "method"] + [_header(name) for name in columns] + ["ok", "same\n%"]
        headers += ["sent\nreq/s"] if open_loop else []
        for header in headers:
            # fold, never truncate: a number cut to "12…" is worse than a wrapped one
            text_column = header in ("arm", "method")
            table.add_column(
                header,
                justify="left" if text_column else "right",
                overflow="fold",
                no_wrap=text_column,
                min_width=max(len(part) for part in header.split("\n")),
            )
        for row in rows:
            values = [
                _speedup(row.speedup) if name == "speedup" else _fmt(getattr(row, name), _FORMATS[name])
                for name in columns
            ]
            if row.method == "baseline":
                values[0] = "1"
            table.add_row(
                row.arm,
                row.method + (f" K={row.num_speculative_tokens}" if row.num_speculative_tokens else ""),
                *values,
                f"{row.requests_ok}/{row.requests_total}",
                _fmt(row.exactness.identical_pct if row.exactness else None, ".0f"),
                *([_sent_rate(row)] if open_loop else []),
            )
        tables.append(table)
    return tables


def _sent_rate(cell: CellMetrics) -> str:
    """The rate the client achieved; flagged where it fell behind its schedule (probes.schedule)."""
    text = _fmt(cell.achieved_rate_rps, ".2f")
    return f"[red]{text} behind schedule[/]" if cell.behind_schedule else text


def category_table(summary: Summary) -> Table | None:
    """Speculative arms per category: tau (over all concurrency levels), exactness, and speedup at
    each level; categories ordered by the first speculative arm's tau, so the ordering shows."""
    rows = [r for r in summary.categories if r.method != "baseline"]
    if not rows:
        return None
    levels = sorted({r.level for r in rows}, key=LoadLevel.order)
    arms = list(dict.fromkeys(r.arm for r in rows))
    pooled = pooling.grouped(rows, lambda r: (r.category, r.arm))
    categories = pooling.category_order(rows, arms[0])
    table = _table(f"per category (ordered by {arms[0]} tau; tau over all load levels)")
    for header in ["category", "arm", "tau", "same\n%"] + [f"speedup\n{level.short()}" for level in levels]:
        text_column = header in ("category", "arm")
        table.add_column(
            header, justify="left" if text_column else "right", overflow="fold", no_wrap=text_column
        )
    for category in categories:
        for arm in arms:
            members = pooled.get((category, arm))
            if members is None:
                continue
            speedups = {r.level: r.speedup for r in members}
            table.add_row(
                category,
                arm,
                _fmt(pooling.tau(members), ".2f"),
                _fmt(pooling.identical_pct((r.identical_pct, r.exactness_pairs) for r in members)[0], ".0f"),
                *(_speedup(speedups.get(level)) for level in levels),
            )
    return table


def drafter_lines(summary: Summary) -> list[str]:
    """One line per arm with a drafter: its tau belongs to that drafter as much as to the method."""
    return [f"{arm.name}: drafter {drafter_note(arm.drafter)}" for arm in summary.arms if arm.drafter]


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


def exactness_table(summary: Summary) -> Table | None:
    """Per arm: share of prompts whose greedy output is identical to the baseline's, and why not."""
    section = summary.exactness
    if not section.applicable:
        return None
    blocks = list(section.arms.items())
    if section.noise_floor:
        blocks.insert(0, (f"{summary.baseline_arm} (2nd pass)", section.noise_floor))
    table = _table(
        f"greedy exactness vs {summary.baseline_arm}, same prompt and concurrency (near tie: top-2 margin < "
        f"{section.near_tie_margin} nats)"
    )
    for header in (
        "arm",
        "pairs",
        "identical\n%",
        "near_tie\n%",
        "diverged\n%",
        "unknown\n%",
        "first divergences\nprompt@position(status)",
    ):
        text_column = header in ("arm",) or header.startswith("first")
        table.add_column(
            header, justify="left" if text_column else "right", overflow="fold", no_wrap=header == "arm"
        )
    for name, block in blocks:
        firsts = [f"{e.prompt_id}@{e.position}({e.status})" for e in block.prompts if e.status != "identical"]
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
LAB_COLUMNS = ("tau", "tok/s", "TPOT p50 ms", "$/Mtok", "identical")


def lab_level(summary: Summary, concurrency: int | LoadLevel | None = None) -> LoadLevel:
    """The load level the lab table shows: the one asked for (a closed-loop concurrency, or a
    level), else the first measured (the lowest concurrency, else the lowest rate)."""
    levels = summary.levels()
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


def lab_rows(summary: Summary, level: LoadLevel) -> tuple[list[str], list[list[str]]]:
    """One row per arm, the workloads side by side (the lab's columns for each)."""
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
            tau = "1" if cell.method == "baseline" else _fmt(cell.tau, ".2f")
            row += [
                tau,
                _fmt(cell.output_tok_s, ".1f"),
                _fmt(cell.tpot_ms_p50, ".1f"),
                _fmt(cell.usd_per_mtok, ".2f"),
                _identical_cell(summary, cell),
            ]
        rows.append(row)
    return header, rows


def lab_markdown(summary: Summary, concurrency: int | LoadLevel | None = None) -> str:
    level = lab_level(summary, concurrency)
    header, rows = lab_rows(summary, level)
    title = f"{summary.regime_name} run {summary.run_id}, {level.label()}"
    note = (
        "TPOT p50 in ms; identical: prompts whose greedy token ids equal the baseline's (near ties: numerics)"
    )
    return "\n".join([f"**{title}** ({note})", "", *markdown_table(header, rows)]) + "\n"


def answer_lines(summary: Summary) -> list[str]:
    """The verdict per window, its caveats, the findings paragraph and the attention backends:
    what the terminal prints first after the tables (plain text, rich markup escaped by the caller)."""
    lines = [f"Verdict ({interval_note(summary)}):"]
    lines += [f"  {v.text()}" for v in window_verdicts(summary)]
    lines += [f"  caveat: {c}" for c in run_caveats(summary)]
    lines += capacity_lines(summary)
    lines += distribution_lines(summary)
    paragraph = findings(summary)
    if paragraph:
        lines += ["Findings: " + " ".join(paragraph)]
    backends = backend_line(summary)
    if backends:
        lines.append(backends)
    counting = draft_counting_line(summary)
    if counting:
        lines.append(counting)
    usage = cpu_line(summary)
    if usage:
        lines.append(usage)
    return lines


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


def timing_line(summary: Summary) -> str | None:
    """Where the run's wall time went, and what the harness itself cost on top of the engine."""
    timing = summary.timing
    if timing is None or timing.overhead_ratio is None:
        return None
    wall, startup, measured = (timing.total(n) for n in ("wall_s", "startup_s", "measured_s"))
    other = wall - startup - measured
    resumed = f" over {len(timing.invocations)} invocations" if len(timing.invocations) > 1 else ""
    prepare, warmup = timing.total("prepare_s"), timing.total("warmup_s")
    return (
        f"Run time{resumed}: {wall / 60:.1f} min = {startup / 60:.1f} min of server start-ups + "
        f"{measured / 60:.1f} min measuring + {other / 60:.1f} min else (preparation {prepare:.0f} s, "
        f"warm-up {warmup:.0f} s, scrapes and shutdowns): {timing.overhead_ratio:.2f}x start-ups + measuring."
    )
