"""The HTML report a design review reads: one self-contained file, nothing fetched when opened.

Everything comes from stored results (the summary is re-derived from the raw files), so the
same run always renders the same bytes: no rendering timestamp, no random ids. Jinja2 runs
with autoescaping on, so model output (``<script>``, ``</table>``, quotes) is shown as text.
"""

from __future__ import annotations

import re
from importlib.resources import files
from typing import Any

import jinja2
from markupsafe import Markup

from harness.config.level import LoadLevel
from harness.core.errors import UserError
from harness.core.formats import bound_text, inert, interval_text, k_text, speedup_text
from harness.core.machine import gpus_text, machine_differences
from harness.core.metrics import Metric, shown
from harness.core.probes.acceptance import DRAFT_COUNTING, TOKENS_PER_FORWARD
from harness.derive.analysis import AnalyzedRun, RunAnalysis
from harness.derive.gates.compare import RunComparison
from harness.derive.intervals import EQUIVALENCE_MARGIN
from harness.derive.verdict import Outcome
from harness.present.cost_text import CEILING_NOTE, COST_NOTE, ceiling_lines, cost_rows, prediction_rows
from harness.present.peers import peers_context
from harness.present.ramp_table import ramp_schedule_sections, ramp_sections
from harness.present.report import figures
from harness.present.report.comparison import comparison_context
from harness.present.report.outcomes import OUTCOME_CLASS, OUTCOME_STYLE, outcome_key
from harness.present.table import (
    LAB_COLUMNS,
    SPEEDUP_NOTE,
    backend_line,
    backend_text,
    cpu_line,
    draft_counting_line,
    drafter_note,
    lab_level,
    lab_markdown,
    lab_rows,
    measured,
    past_stop_line,
    schedule_sections,
    verification_line,
)
from harness.present.verdict_text import (
    OUTCOME_WORDS,
    PUBLISHED_WORDS,
    basis_line,
    capacity_text,
    caveat_text,
    chance_line,
    design_line,
    findings_text,
    outcome_words,
    outputs_text,
    provisional_text,
    statistics_line,
    verdict_line,
)
from harness.results.gate import StoredGate
from harness.results.model import CellMetrics, Summary
from harness.results.raw import RawRun


def _inert_output(value: Any) -> Any:
    """Every value a template writes, its control characters ``inert`` (autoescaping leaves them):
    a prompt id or a server's text with an ESC sequence is shown as ``\\x1b``, never written as the
    bytes a terminal that shows the file (``cat``, a log viewer) would act on."""
    if isinstance(value, Markup):  # already HTML (a figure): its text made inert, its tags kept
        return Markup(inert(str(value)))
    return inert(value) if isinstance(value, str) else value


def template_environment() -> jinja2.Environment:
    env = jinja2.Environment(
        finalize=_inert_output,
        loader=jinja2.FunctionLoader(
            lambda name: files("harness.present.report").joinpath("templates", name).read_text()
        ),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["num"] = lambda value, spec=".2f": "–" if value is None else format(value, spec)
    env.globals["zip"] = zip
    # the style sheet's verdict colours: the figures' (one mapping, harness.present.report.outcomes)
    env.globals["outcome_colour"] = {o.value: s.colour for o, s in OUTCOME_STYLE.items()}
    return env


def _metric_cell(
    metric: Metric, row: CellMetrics, decided: dict[str, float], analysis: RunAnalysis
) -> dict[str, Any]:
    """One metric of one row as the page shows it: text, CSS class, interval, qualifying note. A
    speedup is the cell's one estimate, coloured by what its interval decides; another value is
    marked best only where ``decided`` holds it, a column's best that the analysis tells apart from
    every other arm's (empty today: the analysis decides no difference between arms outside the
    speedup, and a "best" 222 ms beside 224 ms would mark noise)."""
    if metric.baseline_text is not None and row.method == "baseline":
        return {"text": metric.baseline_text, "class": "", "interval": None, "note": None}
    note = metric.flag[1] if metric.flag and getattr(row, metric.flag[0], False) else None
    if metric.ratio:
        estimate = analysis.estimate(row)
        if estimate is None:
            text = "1.00x" if row.arm == analysis.summary.baseline_arm and row.speedup is not None else "–"
            return {"text": text, "class": "", "interval": None, "note": note}
        interval = (
            None
            if estimate.low is None or estimate.high is None
            else [bound_text(estimate.low), bound_text(estimate.high)]
        )
        mark = "*" if analysis.pooled_ratio_differs(row) else ""
        css = OUTCOME_CLASS.get(Outcome(analysis.outcome(row) or estimate.verdict), "")
        text = speedup_text(estimate.point) + mark
        return {"text": text, "class": css, "interval": interval, "note": note}
    value = metric.value(row)
    text = "–" if value is None else format(value, metric.fmt)
    bounds = metric.bounds(row)
    interval = [format(b, metric.fmt) for b in bounds] if bounds and bounds[0] is not None else None
    css = "best" if metric.name in decided and value == decided[metric.name] else ""
    return {"text": text, "class": css, "interval": interval, "note": note}


# a window's mini-lab columns, split so each table fits an 800 px window: (title, CSS class, which
# metrics); the speedup's table keeps the class ``minilab`` (tests/one_answer.py reads it); a metric no
# group names joins the first (speedup, throughput and cost)
_SPECULATION = {"tau", "tokens_per_forward", "copy_share_pct", "identical_pct", "prompt_tokens_mean",
                "prefix_cache_hit_pct"}  # fmt: skip
MINILAB_GROUPS: tuple[tuple[str, str, Any], ...] = (
    ("speedup, throughput and cost", "minilab", None),
    ("speculation and exactness", "minilab-speculation", lambda name: name in _SPECULATION),
    ("time to first token", "minilab-first-token", lambda name: name.startswith(("ttft_", "queueing_"))),
    ("per token and end to end", "minilab-latency", lambda name: name.startswith(("tpot_", "itl_", "e2e_"))),
)


def _groups(metrics: list[Metric], cells: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One window's columns as ``MINILAB_GROUPS``' tables, each with its metrics and row cells."""
    chosen: dict[str, list[int]] = {css: [] for _, css, _ in MINILAB_GROUPS}
    for index, metric in enumerate(metrics):
        css = next((c for _, c, test in MINILAB_GROUPS[1:] if test(metric.name)), MINILAB_GROUPS[0][1])
        chosen[css].append(index)
    return [
        {
            "title": title,
            "css": css,
            "metrics": [metrics[i] for i in chosen[css]],
            "cells": [[row[i] for i in chosen[css]] for row in cells],
        }
        for title, css, _ in MINILAB_GROUPS
        if chosen[css]
    ]


def _tables(analysis: RunAnalysis, gate: StoredGate | None) -> list[dict[str, Any]]:
    tables, summary = [], analysis.summary
    conditions = measured(summary)
    for workload, level in summary.window_keys():
        rows = [c for c in summary.cells if (c.workload, c.level) == (workload, level)]
        metrics = shown("report", conditions | ({"open_loop"} if level.request_rate is not None else set()))
        tables.append(
            {
                "workload": workload,
                "level": level,
                "category": rows[0].category,
                "prompt_format": rows[0].prompt_format,
                "rows": rows,
                # the registry's columns (harness.core.metrics.shown), one table per group
                "groups": _groups(
                    metrics, [[_metric_cell(m, row, {}, analysis) for m in metrics] for row in rows]
                ),
                # the gate's checks of these cells, next to them
                "checks": [
                    c
                    for c in (gate.checks if gate else [])
                    if (c.workload, c.concurrency, c.request_rate) == (workload, *level)
                ],
            }
        )
    return tables


def _legend(summary: Summary) -> list[tuple[str, str]]:
    """What is too long for a table column: each arm's drafter and attention backend."""
    legend = []
    for arm in summary.arms:
        parts = []
        if arm.drafter:
            parts.append(f"drafter {drafter_note(arm.drafter)}")
        parts.append(f"attention backend {backend_text(arm)}")
        if arm.method != "baseline" and arm.draft_counting is not None:
            parts.append(f"drafts counted as {arm.draft_counting.semantics}")
        legend.append((arm.name, "; ".join(parts)))
    return legend


def _verdicts(analysis: RunAnalysis) -> list[dict[str, Any]]:
    """Per window: the plain-words line, and the columns a reviewer scans (the verdict, the arm,
    its speedup [95%], $/Mtok, outputs); caveats become numbered footnotes under the table."""
    rows, notes = [], []
    for verdict in analysis.verdicts:
        best, estimate = verdict.best, verdict.estimate
        marks = []
        for caveat in map(caveat_text, verdict.caveats):
            if caveat not in notes:
                notes.append(caveat)
            marks.append(notes.index(caveat) + 1)
        rows.append(
            {
                "where": f"{verdict.workload} {verdict.level.short()}",
                "verdict": verdict,
                "provisional": provisional_text(verdict),
                "line": verdict_line(verdict),
                "statistics": statistics_line(verdict),
                "design": design_line(verdict, analysis.basis.precision_pct),
                "answer": verdict.deploy,
                "outcome": outcome_words(verdict),
                "class": "" if verdict.lossy else OUTCOME_CLASS.get(verdict.outcome, ""),
                "speedup": speedup_text(estimate.point, estimate.low, estimate.high) if estimate else "–",
                "best": best.arm if best else "–",
                "usd_before": verdict.baseline.usd_per_mtok,
                "usd_after": best.usd_per_mtok if best else None,
                # a change in $/Mtok only where the verdict decided one
                "saving_pct": verdict.saving_pct
                if verdict.outcome in (Outcome.PAYS, Outcome.LOSES)
                else None,
                "identical": outputs_text(verdict),
                "marks": marks,
            }
        )
    return rows, notes


def _fingerprint(raw: RawRun, summary: Summary) -> list[tuple[str, str]]:
    regime, record, environment = raw.regime, raw.record, raw.environment
    hardware = regime.hardware
    pinned = f"{hardware.gpu_count} x {hardware.gpu_model}" if hardware.kind == "gpu" else "CPU"
    gpus = ", ".join(g["name"] for g in environment.get("gpus") or []) or "none"
    drafters = record.drafters
    arms = ", ".join(
        f"{a.name} ({a.method}"
        + (f", {k_text(a.num_speculative_tokens)}" if a.num_speculative_tokens else "")
        + (f", drafter {drafter_note(drafters[a.name])}" if a.name in drafters else "")
        + ")"
        for a in regime.arms
    )
    target, load = regime.target, regime.load
    return [
        ("regime", f"{regime.name} (fingerprint {record.fingerprint})"),
        ("set on the command line", "; ".join(summary.overrides) or "nothing (the regime file as written)"),
        ("hardware pinned", pinned),
        ("measured on", f"CPU {environment.get('cpu_model')} x {environment.get('cpu_count')}; GPUs: {gpus}"),
        ("tensor parallel", str(regime.tensor_parallel_size)),
        (
            "target",
            f"{record.resolved_model} ({target.dtype}, quantization {target.quantization or 'none'}, max "
            f"len {target.max_model_len})",
        ),
        (
            "engine",
            f"{environment.get('engine_version')} (pinned {regime.engine.version or 'no pin'}; "
            f"{'eager' if regime.engine.enforce_eager else 'compiled'} mode)",
        ),
        ("arms", arms),
        ("attention backend", backend_line(summary) or "not reported by the engine"),
        ("draft counting", draft_counting_line(summary) or "not recorded (no spec arm, or an older run)"),
        ("verification", verification_line(summary) or "not applicable (no spec arm, or not this engine's)"),
        ("engine patches", "; ".join(summary.engine_patches) or "none (the engine as installed)"),
        ("drafts past a stop", past_stop_line(summary) or "none counted (no draft accepted)"),
        ("sampling", f"temperature {regime.sampling.temperature}, seed {regime.sampling.seed}"),
        (
            "load",
            ", ".join(lv.label() for lv in load.levels())
            + (f" ({load.arrival} arrivals)" if load.request_rate else "")
            + f", {load.num_prompts} prompts per window, max {load.max_output_tokens} output tokens",
        ),
        ("SLO", regime.slo.describe() if regime.slo else "none set"),
        ("environment fingerprint", str(environment.get("fingerprint", "not recorded"))),
        (
            "target identity",
            str((environment.get("target_identity") or {}).get("content_sha256", "not hashed")),
        ),
        (
            "harness",
            f"{environment.get('harness_version')} (git {environment.get('harness_git_sha') or 'unknown'}), "
            f"Python {environment.get('python')}, torch {environment.get('torch')}",
        ),
    ]


# packages named by an ImportError a run stored in its power note, as a reader installs them
_PACKAGES = {"pynvml": "nvidia-ml-py"}


def readable_note(note: str) -> str:
    """A stored power note in words: "nvml: No module named 'pynvml'" (an ImportError's text, as
    harness.run.sensors.power recorded it) becomes "no NVML on this machine: nvidia-ml-py not installed"."""

    def missing(match: re.Match[str]) -> str:
        source, module = match.group(1), match.group(2)
        package = _PACKAGES.get(module, module)
        return f"no {source.upper() if source else module} on this machine: {package} not installed"

    return re.sub(r"(?:(\w+): )?No module named '([\w.]+)'", missing, note)


def _published(analysis: RunAnalysis) -> list[dict[str, str]]:
    """Each arm's published figures beside what its cells measured (``analysis.published``)."""
    rows = []
    for check in analysis.published:
        unit = "x" if check.quantity == "speedup" else ""
        measured = "–" if check.measured is None else f"{check.measured:.2f}{unit}"
        if check.measured_low is not None and check.measured_high is not None:
            measured += f" {interval_text(check.measured_low, check.measured_high)}"
        rows.append(
            {
                "arm": check.arm,
                "where": f"{check.workload} {check.level.short()}",
                "quantity": check.quantity,
                "measured": measured,
                "published": f"{check.low:g}-{check.high:g}{unit}",
                "source": check.source,
                "outcome": PUBLISHED_WORDS[check.outcome],
                "class": "loses" if check.outcome == "outside" else "",
            }
        )
    return rows


def _warnings(analysis: RunAnalysis) -> list[str]:
    """Banners above the verdict: what qualifies every number of the run (the verdict's caveats),
    and raw lines that could not be read."""
    caveats = [caveat_text(c) for c in analysis.caveats]
    return caveats + [f"Raw data not read: {note}" for note in analysis.summary.unread_lines]


def _categories(analysis: RunAnalysis) -> dict[str, Any]:
    """Per category and concurrency level: tau, speedup [95%] (the cells' model over the category's
    start-ups) and exactness of each speculative arm, in ``analysis.category_order``."""
    rows = [r for r in analysis.summary.categories if r.method != "baseline"]
    arms = list(dict.fromkeys(r.arm for r in rows))
    levels = sorted({r.level for r in rows}, key=LoadLevel.order)
    cells = {}
    for r in rows:
        estimate = analysis.category_estimate(r)
        cells[(r.category, r.arm, r.level)] = {
            "row": r,
            "speedup": speedup_text(estimate.point, estimate.low, estimate.high) if estimate else "–",
            "class": OUTCOME_CLASS.get(Outcome(analysis.category_outcome(r) or estimate.verdict), "")
            if estimate
            else "",
        }
    return {"arms": arms, "levels": levels, "order": list(analysis.category_order), "cells": cells}


def _trained_drafters(drafters: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Per arm with a drafter trained here: what a reviewer asks before trusting its tau (what it
    was trained on, whether the measured prompts were held out, how far training got)."""
    rows = []
    for arm, drafter in drafters.items():
        manifest = drafter.get("manifest") or {}
        if manifest.get("kind") != "trained":
            continue
        data, training = manifest.get("data", {}), manifest.get("training", {})
        validation = manifest.get("validation") or [{}]
        held_out = drafter.get("held_out") or {}
        rows.append(
            {
                "arm": arm,
                "method": manifest.get("method"),
                "workloads": ", ".join(f"{w['name']} ({w['used']})" for w in data.get("workloads", [])),
                "answered": data.get("answered"),
                "answer_tokens": data.get("answer_tokens"),
                "held_out": (
                    f"trained on {held_out['trained_on']} of the {held_out['measured_prompts']} measured "
                    "prompts"
                    if held_out
                    else "not checked"
                ),
                "steps": training.get("steps"),
                "epochs": training.get("epochs_completed"),
                "seconds": training.get("seconds"),
                "accuracy": " / ".join(
                    f"{a:.3f}" for a in validation[-1].get("accuracy_per_position", [])[:8]
                ),
                "versions": ", ".join(
                    f"{k} {v}" for k, v in sorted((manifest.get("versions") or {}).items())
                ),
                "answers_dtype": (manifest.get("target") or {}).get("answers_dtype"),
            }
        )
    return rows


def _lab(analysis: RunAnalysis) -> dict[str, Any] | None:
    """The lab's table at the lowest measured level; None where no arm measured anything (every arm
    failed: the page still says what happened to each)."""
    summary = analysis.summary
    if not summary.levels():
        return None
    level = lab_level(summary)
    header, rows = lab_rows(analysis, level)
    workloads = list(dict.fromkeys(c.workload for c in summary.cells))
    width = len(LAB_COLUMNS)
    return {
        "level": level,
        "workloads": workloads,
        "columns": LAB_COLUMNS,
        "rows": rows,
        # one table per workload on the page (so that it fits a narrow window), the same cells
        "by_workload": [
            (w, [[row[0], *row[1 + i * width : 1 + (i + 1) * width]] for row in rows])
            for i, w in enumerate(workloads)
        ],
        "markdown": lab_markdown(analysis, level),
        "header": header,
    }


def _speedup_points(analysis: RunAnalysis) -> list[tuple[CellMetrics, Any, str]]:
    """Each speculative cell with its one estimate and what its window decides of it, for the
    speedup figure."""
    return [
        (c, e, analysis.outcome(c) or e.verdict)
        for c in analysis.summary.cells
        if (e := analysis.estimate(c)) is not None
    ]


def _outcomes(analysis: RunAnalysis) -> dict[tuple[str, str, LoadLevel], str | None]:
    """Each cell's outcome as its window's verdict reads it (None for the baseline's), for the figures."""
    return {(c.arm, c.workload, c.level): analysis.outcome(c) for c in analysis.summary.cells}


# what each outcome means, in the verdict's words (OUTCOME_WORDS), for the definitions and the key
# under the verdict table; the interval itself is named by the analysis (``basis_line``)
OUTCOME_MEANING = {
    Outcome.PAYS: "the whole interval lies above 1",
    Outcome.LOSES: "the whole interval lies below 1",
    Outcome.EQUIVALENT: f"the whole interval lies within {EQUIVALENCE_MARGIN:.0%} of 1 (on the log scale)",
    Outcome.INDISTINGUISHABLE: f"the interval spans 1 and reaches more than {EQUIVALENCE_MARGIN:.0%} from it",
    Outcome.UNVERIFIED: "no interval: one start-up per arm and no machine calibration",
}


def _outcome_key() -> list[dict[str, str]]:
    """Each outcome: its words (the verdict's), what it means, how the figures draw it."""
    return [
        {
            "words": OUTCOME_WORDS[o],
            "meaning": OUTCOME_MEANING[o],
            "shape": OUTCOME_STYLE[o].shape,
            "hue": OUTCOME_STYLE[o].hue,
            "class": OUTCOME_CLASS.get(o, ""),
        }  # fmt: skip
        for o in OUTCOME_MEANING
    ]


def report_context(run: AnalyzedRun) -> dict[str, Any]:
    raw, analysis, gate = run.raw, run.analysis, run.gate
    summary = analysis.summary
    record = raw.record
    arms = [a.name for a in summary.arms]
    workloads = list(dict.fromkeys(c.workload for c in summary.cells))
    rows = summary.cells
    samples = {name: arm.samples for name, arm in raw.arms.items()}
    power_windows = {name: arm.windows for name, arm in raw.arms.items()}
    sources = sorted({c.power_source for c in rows if c.power_source})
    notes = sorted({readable_note(c.power_note) for c in rows if c.power_note})
    verdicts, verdict_notes = _verdicts(analysis)
    outcomes = _outcomes(analysis)
    # the GPUs read (the servers' own), named where the power figures are
    on = f" on {gpus_text([g.model_dump() for g in summary.power_gpus])}" if summary.power_gpus else ""
    return {
        "power_note": f"measured with {', '.join(sources)}{on}"
        if sources
        else (", ".join(notes) or "not recorded"),
        "power_measured": bool(sources),
        "copy_measured": any(c.copy_share_pct is not None for c in rows),
        "summary": summary,
        "run_id": summary.run_id,
        "fingerprint": _fingerprint(raw, summary),
        "warnings": _warnings(analysis),
        "tables": _tables(analysis, gate),
        "speedup_note": SPEEDUP_NOTE,
        "legend": _legend(summary),
        "cpu_line": cpu_line(summary),
        "verdicts": verdicts,
        "verdict_notes": verdict_notes,
        "capacity": [capacity_text(c) for c in analysis.capacities],
        "published": _published(analysis),
        "interval_note": basis_line(analysis.basis),
        "outcome_key": _outcome_key(),
        "chance_note": chance_line(analysis.basis),
        "findings": findings_text(analysis.findings),
        "cost_rows": cost_rows(analysis.cost),
        "prediction_rows": prediction_rows(analysis.cost),
        "cost_note": COST_NOTE,
        "ceiling": ceiling_lines(analysis.ceiling),
        "ceiling_note": CEILING_NOTE,
        "lab": _lab(analysis),
        "gate": gate,
        "categories": _categories(analysis),
        "schedules": schedule_sections(analysis),
        "ramps": ramp_sections(summary) + ramp_schedule_sections(analysis),
        "trained_drafters": _trained_drafters(record.drafters),
        "peers": peers_context(summary),
        "figures": [
            f
            for f in (
                ("tau per arm and workload", figures.tau_figure(analysis.taus(), arms, workloads)),
                (
                    f"speedup vs concurrency, with 95% intervals; {outcome_key()}",
                    figures.speedup_figure(
                        _speedup_points(analysis), EQUIVALENCE_MARGIN, summary.baseline_arm
                    ),
                ),
                (
                    f"throughput per user vs per server (Pareto); {outcome_key()}",
                    figures.pareto_figure(list(analysis.pareto), "server", summary.baseline_arm, outcomes),
                ),
                (
                    "goodput vs request rate" if summary.slo else "throughput vs request rate",
                    figures.rate_figure(rows, arms, workloads, summary.slo is not None),
                ),
                ("per-position acceptance", figures.per_position_figure(analysis.per_position)),
                (f"step cost vs K; {outcome_key()}", figures.step_cost_figure(analysis.cost, outcomes)),
                ("TPOT distribution", figures.tpot_figure(samples)),
                ("power over time", figures.power_figure(power_windows)),
                (
                    "the ramp: tok/s and TPOT over time",
                    figures.ramp_figure({n: (a.ramp_windows, a.ramp) for n, a in raw.arms.items()}),
                ),
            )
            if f[1] is not None
        ],
        **_acceptance_positions(analysis),
        "exactness": summary.exactness,
        "environment": raw.environment,  # the machine, compared by render_comparison
        "draft_counting": DRAFT_COUNTING,
        "tokens_per_forward": TOKENS_PER_FORWARD,
    }


def _acceptance_positions(analysis: RunAnalysis) -> dict[str, Any]:
    """Per speculative arm, the marginal and conditional per-position rates over its cells, and the
    cells whose counters failed a consistency check."""
    table = []
    for arm, (marginal, conditional) in analysis.per_position.items():
        table.append({"arm": arm, "kind": "marginal", "rates": list(marginal)})
        table.append({"arm": arm, "kind": "conditional", "rates": list(conditional)})
    rows = analysis.summary.cells
    failures = [f"{c.arm} {c.workload} @ {c.level.label()}: {p}" for c in rows for p in c.acceptance_checks]
    return {
        "acceptance_positions": table,
        "acceptance_width": max((len(r["rates"]) for r in table), default=0),
        "acceptance_failures": failures,
    }


def render_context(context: dict[str, Any]) -> str:
    return template_environment().get_template("report.html.j2").render(**context)


def render_report(run: AnalyzedRun) -> str:
    return render_context(report_context(run))


def render_comparison(first: AnalyzedRun, second: AnalyzedRun, force: bool, changes: RunComparison) -> str:
    """Run B against run A, refused across regimes: a verdict per cell first (``changes``: the
    two-run gate's intervals, ``harness.derive.gates.compare``), the regime rows that differ, then
    each cell's metrics with the ratio B / A."""
    a, b = report_context(first), report_context(second)
    run_a, run_b = first.root, second.root
    fp_a, fp_b = a["summary"].regime_fingerprint, b["summary"].regime_fingerprint
    if fp_a != fp_b and not force:
        raise UserError(
            f"{run_a} and {run_b} ran in different regimes (fingerprints {fp_a} vs {fp_b}); their numbers "
            "are not comparable. Pass --force to put them side by side anyway (the page will say so)."
        )
    machines = machine_differences(a["environment"], b["environment"])
    if machines and not force:
        raise UserError(
            f"{run_a} and {run_b} were measured on different machines (A vs B: {'; '.join(machines)}); the "
            "machine alone moves the numbers. Pass --force to put them side by side anyway (the page will "
            "say so)."
        )
    return (
        template_environment()
        .get_template("compare.html.j2")
        .render(
            a=a,
            b=b,
            same_regime=fp_a == fp_b,
            machine_differences=machines,
            **comparison_context(a, b, changes, first.analysis, second.analysis),
        )
    )
