"""The study page: one self-contained HTML file (``index.html``) with the recommendation grid, the
break-even points, best K, the flips and the figures, next to each point's own report (``p0.html``,
...), all rendered from stored results: the same study always renders the same bytes."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt

from harness.derive.analysis import AnalyzedRun
from harness.derive.study.analysis import BreakEven
from harness.derive.study.collect import StudyResults
from harness.derive.study.policy import RULE as POLICY_RULE
from harness.present.report import render_report, template_environment
from harness.present.report.figures import _png
from harness.present.study.tables import (
    best_k_rows,
    break_even_rows,
    engine_lines,
    policy_rows,
    recommendation_rows,
)
from harness.results.files import write_text_atomic


def speedup_figures(study: StudyResults) -> list[tuple[str, str]]:
    """Per point and workload: speedup vs concurrency per arm, interval bands, break-even markers."""
    crossings = {(b.point, b.arm, b.workload): b for b in study.break_evens()}
    out = []
    for point in study.summaries:
        workloads = sorted({o.workload for o in study.observations if o.point == point})
        for workload in workloads:
            series: dict[str, list] = {}
            for o in study.observations:
                if (
                    o.point == point
                    and o.workload == workload
                    and o.method != "baseline"
                    and o.speedup is not None
                ):
                    series.setdefault(o.arm, []).append(o)
            if not series:
                continue
            fig, ax = plt.subplots(figsize=(6.4, 3.4))
            for arm, members in series.items():
                members.sort(key=lambda o: o.concurrency)
                levels = [o.concurrency for o in members]
                estimates = [o.estimate() for o in members]
                (line,) = ax.plot(levels, [e.point for e in estimates], marker="o", label=arm)  # type: ignore[union-attr]
                if all(e.low is not None for e in estimates):  # type: ignore[union-attr]
                    ax.fill_between(
                        levels,
                        [e.low for e in estimates],
                        [e.high for e in estimates],  # type: ignore[union-attr, misc]
                        color=line.get_color(),
                        alpha=0.15,
                        linewidth=0,
                    )
                _mark(ax, crossings.get((point, arm, workload)), line.get_color())
            levels = sorted({o.concurrency for members in series.values() for o in members})
            ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
            ax.set_xscale("log", base=2)
            ax.set_xticks(levels, [str(level) for level in levels])
            ax.minorticks_off()
            ax.set_xlabel("concurrency")
            ax.set_ylabel("speedup vs baseline")
            ax.set_title(
                f"{point} {workload}: speedup vs concurrency (dotted: break-even, shaded: its 95% set)",
                fontsize=9,
            )
            ax.legend(fontsize=7)
            out.append((f"{point} ({study.label(point)}), {workload}: speedup vs concurrency", _png(fig)))
    return out


def _mark(ax: plt.Axes, crossing: BreakEven | None, colour: str) -> None:
    """The point crossing as a dotted line; its 95% set (levels paired by round) as a faint span
    running to the edge of the measured range on an open-ended side."""
    if crossing is None or crossing.kind != "crosses" or crossing.concurrency is None:
        return
    ax.axvline(crossing.concurrency, color=colour, linestyle=":", linewidth=1.0)
    if crossing.has_set:
        low = crossing.low if crossing.low is not None else min(crossing.levels)
        high = crossing.high if crossing.high is not None else max(crossing.levels)
        ax.axvspan(low, high, color=colour, alpha=0.08, linewidth=0)


def k_figures(study: StudyResults) -> list[tuple[str, str]]:
    """Per point, method family with several K, and workload: tau and tok/s vs K, one line per load."""
    out = []
    groups: dict[tuple[str, str, str], list] = {}
    for o in study.observations:
        if o.method != "baseline" and o.k is not None:
            groups.setdefault((o.point, o.family, o.workload), []).append(o)
    for (point, family, workload), members in sorted(groups.items()):
        if len({o.k for o in members}) < 2:
            continue
        fig, (left, right) = plt.subplots(1, 2, figsize=(7.6, 3.0))
        for level in sorted({o.concurrency for o in members}):
            at = sorted((o for o in members if o.concurrency == level), key=lambda o: o.k)
            left.plot(
                [o.k for o in at],
                [o.tau if o.tau is not None else float("nan") for o in at],
                marker="o",
                label=f"@{level}",
            )
            right.plot(
                [o.k for o in at],
                [o.output_tok_s if o.output_tok_s is not None else float("nan") for o in at],
                marker="o",
                label=f"@{level}",
            )
        ks = sorted({o.k for o in members})
        for ax, label in ((left, "tau"), (right, "output tok/s")):
            ax.set_xticks(ks, [str(k) for k in ks])
            ax.set_xlabel("K (draft depth)")
            ax.set_ylabel(label)
        left.legend(fontsize=7, title="concurrency", title_fontsize=7)
        fig.suptitle(f"{point} {family} on {workload}: tau and tok/s vs K", fontsize=9)
        fig.tight_layout()
        out.append((f"{point} ({study.label(point)}), {family} on {workload}: tau and tok/s vs K", _png(fig)))
    return out


def render_study(study: StudyResults, runs: dict[str, AnalyzedRun], out_dir: Path) -> Path:
    """Write ``out_dir/index.html`` and each point's own report (``runs``: the points' analysed
    runs); returns the index."""
    record = study.record
    points = []
    for point in record.points:
        report = None
        if point.id in study.summaries:
            report = f"{point.id}.html"
            write_text_atomic(out_dir / report, render_report(runs[point.id]))
        arms = [c.arm for c in study.summaries[point.id].cells] if point.id in study.summaries else []
        points.append(
            {
                "id": point.id,
                "label": study.label(point.id),
                "fingerprint": point.fingerprint,
                "arms": ", ".join(dict.fromkeys(arms)) or "-",
                "report": report,
            }
        )
    context = {
        "record": record,
        "study_id": study.root.name,
        "axes_text": "; ".join(f"{path} in {values}" for path, values in record.regime_axes.items())
        or "none",
        "families_text": ", ".join(sorted(set(record.families.values()))),
        "missing": study.missing,
        "points": points,
        "recommendation": dict(zip(("header", "rows"), recommendation_rows(study), strict=True)),
        "break_even": dict(zip(("header", "rows"), break_even_rows(study), strict=True)),
        "best_k": dict(zip(("header", "rows"), best_k_rows(study), strict=True)),
        "policy": dict(zip(("header", "rows"), policy_rows(study), strict=True)),
        "policy_rule": POLICY_RULE[0].upper() + POLICY_RULE[1:],
        "policy_engine": engine_lines(study),
        "flips": study.flips(),
        "figures": speedup_figures(study) + k_figures(study),
    }
    index = out_dir / "index.html"
    write_text_atomic(index, template_environment().get_template("study.html.j2").render(**context))
    return index
