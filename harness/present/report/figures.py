"""The report's figures: matplotlib, rendered to PNG and embedded as data URIs.

Deterministic on purpose: the Agg backend, fixed sizes, no timestamps in the PNG metadata, so
the same results always give the same bytes and reports can be diffed.
"""

from __future__ import annotations

import base64
import io
import math

import matplotlib

matplotlib.use("Agg")  # no display; also the only backend whose PNGs are byte-stable
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402
from cycler import cycler  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from harness.config.level import LoadLevel  # noqa: E402
from harness.core.probes import ramp  # noqa: E402
from harness.derive.cost_model import CostModel  # noqa: E402
from harness.derive.history.trend import Series  # noqa: E402
from harness.derive.intervals import Estimate  # noqa: E402
from harness.present.report.outcomes import IDENTITY, OUTCOME_STYLE, style_of  # noqa: E402
from harness.present.verdict_text import OUTCOME_WORDS  # noqa: E402
from harness.results.model import CellMetrics  # noqa: E402
from harness.results.records import RampWindowRecord, RequestRecord, WindowRecord  # noqa: E402

# arms and workloads told apart by colours that are no outcome's: green and red mean pays and loses
matplotlib.rcParams["axes.prop_cycle"] = cycler(color=list(IDENTITY))


def _png(fig: plt.Figure) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def _legend(ax: plt.Axes, fontsize: int = 7) -> None:
    """The legend beside the axes, not over the lines (the saved PNG widens to hold it)."""
    ax.legend(fontsize=fontsize, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)


def _arm_labels(ax: plt.Axes, positions: list[float], labels: list[str]) -> None:
    """Arm names under the axis, slanted so long names (``eagle3_untrained_k3``) never collide."""
    ax.set_xticks(positions, labels, rotation=25, ha="right", rotation_mode="anchor", fontsize=8)


def tau_figure(taus: dict[tuple[str, str], float], arms: list[str], workloads: list[str]) -> str | None:
    spec_arms = [a for a in arms if any((a, w) in taus for w in workloads)]
    if not spec_arms:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    width = 0.8 / len(workloads)
    for index, workload in enumerate(workloads):
        xs = [i + index * width for i in range(len(spec_arms))]
        ax.bar(xs, [taus.get((a, workload), 0.0) for a in spec_arms], width, label=workload)
    _arm_labels(ax, [i + width * (len(workloads) - 1) / 2 for i in range(len(spec_arms))], spec_arms)
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_ylabel("tau (mean acceptance length)")
    ax.set_title("tau per arm and workload")
    _legend(ax, fontsize=8)
    return _png(fig)


def _cell_point(ax: plt.Axes, x: float, y: float, outcome: str | None, size: float = 7) -> None:
    """One cell drawn as its outcome says (``OUTCOME_STYLE``): colour, marker, filled or hollow; its
    gid names the outcome, so a test reads what each point says without decoding the PNG."""
    style = style_of(outcome)
    (point,) = ax.plot(
        [x],
        [y],
        linestyle="none",
        marker=style.marker,
        markersize=size,
        color=style.colour,
        markerfacecolor=style.colour if style.filled else "white",
        markeredgecolor=style.colour,
        zorder=3,
    )
    point.set_gid(f"outcome:{outcome}")


def _outcome_legend(ax: plt.Axes, outcomes: set[str], **where) -> None:
    """The legend: the series (their lines' labels), then each outcome drawn, in the verdict's words."""
    handles, labels = ax.get_legend_handles_labels()
    for outcome in (o for o in OUTCOME_STYLE if o.value in outcomes):
        style = OUTCOME_STYLE[outcome]
        handles.append(
            Line2D(
                [],
                [],
                linestyle="none",
                marker=style.marker,
                color=style.colour,
                markerfacecolor=style.colour if style.filled else "white",
            )  # fmt: skip
        )
        labels.append(OUTCOME_WORDS[outcome])
    ax.legend(handles, labels, **where)


def speedup_figure(
    cells: list[tuple[CellMetrics, Estimate, str]], equivalence: float, baseline_label: str
) -> str | None:
    """Per speculative arm and workload, its speedup against concurrency with its interval as bars,
    and the band within which it is "no different" from the baseline. Each point and its bar are
    drawn as its outcome says (``OUTCOME_STYLE``: each cell's outcome, over the window's arms at
    once); the line joining an arm's points only says which arm it is, in a colour no outcome has."""
    closed = [(c, e, o) for c, e, o in cells if c.request_rate is None]
    if not closed:
        return None
    fig, ax = plt.subplots(figsize=(9.6, 3.8))  # the report's column width
    series: dict[tuple[str, str], list[tuple[float, Estimate, str]]] = {}
    # the frame holds every point and every interval within a factor of 2 beyond the points; an
    # interval past that is cut at the frame and marked there (a caret pointing on)
    points_at = [e.point for _, e, _ in closed]
    floor = min(min(points_at), math.exp(-equivalence)) / 2
    ceiling = max(max(points_at), math.exp(equivalence)) * 2
    bounds = [b for _, e, _ in closed for b in (e.low, e.high) if b is not None]
    bottom = max(floor, min([*points_at, *bounds, math.exp(-equivalence)]) / 1.05)
    top = min(ceiling, max([*points_at, *bounds, math.exp(equivalence)]) * 1.05)
    for cell, estimate, outcome in closed:
        series.setdefault((cell.arm, cell.workload), []).append((cell.concurrency, estimate, outcome))
    for index, ((arm, workload), points) in enumerate(series.items()):
        points.sort(key=lambda p: p[0])
        dodge = 2 ** (0.05 * (index - (len(series) - 1) / 2))  # side by side, so the bars do not overlap
        points = [(c * dodge, e, o) for c, e, o in points]
        xs, ys = [c for c, _, _ in points], [e.point for _, e, _ in points]
        ax.plot(xs, ys, linewidth=1.0, label=f"{arm} / {workload}")
        for x, e, outcome in points:
            colour = style_of(outcome).colour
            if e.low is not None and e.high is not None:
                low, high = max(e.low, bottom), min(e.high, top)
                ax.errorbar([x], [e.point], yerr=[[e.point - low], [high - e.point]], color=colour,
                            capsize=3, linewidth=1.0)  # fmt: skip
                for cut, end, marker in ((e.low < bottom, bottom, 7), (e.high > top, top, 6)):
                    if cut:  # matplotlib's carets: 6 up, 7 down
                        ax.plot([x], [end], marker=marker, markersize=7, color=colour, linestyle="none")
            _cell_point(ax, x, e.point, outcome)
    ax.axhspan(math.exp(-equivalence), math.exp(equivalence), color="grey", alpha=0.2, linewidth=0)
    ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    # a ratio on a log axis: 0.5x and 2x sit equally far from 1, and a wide interval does not flatten the rest
    ax.set_yscale("log")
    ax.set_ylim(bottom, top)
    # evenly spaced ticks, at least three: a log locator gives a ratio range of 0.9-1.3 a single "1x"
    ax.yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(nbins=6, min_n_ticks=3))
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda y, _: f"{y:.3g}x"))
    ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    levels = sorted({c.concurrency for c, _, _ in closed})
    ax.set_xscale("log", base=2)
    ax.set_xticks(levels, [str(level) for level in levels])
    ax.minorticks_off()
    ax.set_xlabel("concurrency")
    ax.set_ylabel(f"speedup vs {baseline_label}")
    ax.set_title(
        f"speedup vs concurrency (grey band: within {equivalence:.0%} of 1; each point drawn as its verdict, "
        "see the legend; a caret: the interval goes on past the frame)",
        fontsize=9,
    )
    # inside the axes: the figure keeps the column's width
    _outcome_legend(ax, {o for _, _, o in closed}, fontsize=8, loc="best", framealpha=0.8)
    return _png(fig)


# a cell's outcome by (arm, workload, level): what its window's verdict decides of it
Outcomes = dict[tuple[str, str, LoadLevel], str | None]


def step_cost_figure(model: CostModel, outcomes: Outcomes) -> str | None:
    """The speculative step's cost (x the baseline's step) against K, one line per method and load
    level, each point (a cell, drawn as its outcome says) with its 95% interval and the fitted line
    c(K) = a + b K dashed in the line's colour; the baseline's step is 1. None below two K values of
    one method."""
    if not model.lines:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 3.4))
    drawn_outcomes: set[str] = set()
    for line in model.lines:
        points = sorted(
            (
                c
                for c in model.costs
                if (c.method, c.drafter, c.workload, c.level)
                == (line.method, line.drafter, line.workload, line.level)
                and c.k
            ),
            key=lambda c: c.k or 0,
        )
        label = f"{line.method} {line.workload} {line.level.short()}"
        ks = [c.k or 0 for c in points]
        span = [min(ks), max(ks)]
        ax.plot(span, [line.at(k)[0] for k in span], linestyle="--", linewidth=1.0, label=label)
        for c in points:
            outcome = outcomes.get((c.arm, c.workload, c.level))
            if c.low is not None and c.high is not None:
                ax.errorbar([c.k], [c.cost], yerr=[[c.cost - c.low], [c.high - c.cost]],
                            color=style_of(outcome).colour, capsize=3, linewidth=1.0)  # fmt: skip
            _cell_point(ax, c.k or 0, c.cost, outcome, size=6)
            if outcome:
                drawn_outcomes.add(outcome)
    ax.axhline(1.0, color="grey", linewidth=0.8)
    # a linear K axis: the fitted line is linear in K, and drawn straight only on one
    every_k = sorted({k for line in model.lines for k in line.ks})
    ax.set_xticks(every_k, [str(k) for k in every_k])
    ax.set_xlabel("K (draft tokens per step)")
    ax.set_ylabel("step cost (x the baseline's step)")
    ax.set_title("speculative step cost vs K, 95% intervals (dashed: the fitted line; points: the verdict)",
                 fontsize=9)  # fmt: skip
    _outcome_legend(ax, drawn_outcomes, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                    borderaxespad=0.0)  # fmt: skip
    return _png(fig)


def pareto_figure(
    points: list[tuple[str, str, int, float, float]], per: str, baseline: str, outcomes: Outcomes
) -> str | None:
    """Throughput per user against throughput per machine (or GPU), one curve per arm and workload
    over the load levels (vLLM's ``bench sweep plot_pareto``, AIPerf's Pareto plot); the baseline's
    front drawn dashed: an arm's point above and right of it serves more at the same per-user speed.
    Each point is a cell, drawn as its outcome says (the baseline's hollow black).
    ``points``: (arm, workload, concurrency, tok/s per user, tok/s per ``per``)."""
    curves: dict[tuple[str, str], list[tuple[int, float, float]]] = {}
    for arm, workload, level, user, machine in points:
        curves.setdefault((arm, workload), []).append((level, user, machine))
    if not any(len(c) >= 2 for c in curves.values()):
        return None
    fig, ax = plt.subplots(figsize=(6.4, 3.4))
    drawn_outcomes: set[str] = set()
    for (arm, workload), curve in curves.items():
        curve.sort()
        style = {"linestyle": "--", "color": "black"} if arm == baseline else {}
        ax.plot([u for _, u, _ in curve], [m for _, _, m in curve], label=f"{arm} / {workload}", **style)
        for level, user, machine in curve:
            outcome = outcomes.get((arm, workload, LoadLevel(level)))
            _cell_point(ax, user, machine, outcome, size=5)
            if outcome:
                drawn_outcomes.add(outcome)
            ax.annotate(str(level), (user, machine), fontsize=6, textcoords="offset points", xytext=(3, 3))
    ax.set_xlabel("output tok/s per user (per request in flight)")
    ax.set_ylabel(f"output tok/s per {per}")
    ax.set_title(
        f"throughput per user vs per {per}, by concurrency (dashed: the baseline's front; points: the "
        "verdict)",
        fontsize=9,
    )
    _outcome_legend(ax, drawn_outcomes, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                    borderaxespad=0.0)  # fmt: skip
    return _png(fig)


def rate_figure(rows: list[CellMetrics], arms: list[str], workloads: list[str], slo: bool) -> str | None:
    """Open-loop windows: goodput (with SLO targets; else completed requests/s) against the offered
    request rate, per arm and workload, with the ideal (everything served) as a dashed line."""
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    plotted, rates = False, set()
    for arm in arms:
        for workload in workloads:
            points = sorted(
                (r.request_rate, r.goodput_rps if slo else r.completed_rps)
                for r in rows
                if r.arm == arm and r.workload == workload and r.request_rate is not None and r.duration_s > 0
            )
            points = [(x, y) for x, y in points if y is not None]
            if points:
                ax.plot(
                    [x for x, _ in points], [y for _, y in points], marker="o", label=f"{arm} / {workload}"
                )
                rates.update(x for x, _ in points)
                plotted = True
    if not plotted:
        plt.close(fig)
        return None
    ax.plot(sorted(rates), sorted(rates), color="grey", linewidth=0.8, linestyle="--", label="offered")
    ax.set_xlabel("offered request rate (requests/s)")
    ax.set_ylabel("goodput (requests/s within SLO)" if slo else "completed requests/s")
    ax.set_title("goodput vs request rate" if slo else "throughput vs request rate (no SLO set)")
    _legend(ax)
    return _png(fig)


def per_position_figure(curves: dict[str, tuple[tuple[float, ...], tuple[float | None, ...]]]) -> str | None:
    """Per arm, the marginal acceptance per draft position (solid: accepted at i / drafts) and the
    conditional (dashed: accepted at i given i - 1 was): where the chain breaks."""
    if not curves:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    # positions counted from 1, as the findings count them; the limits leave room for points at 0 and 1
    for arm, (marginal, conditional) in curves.items():
        (line,) = ax.plot(range(1, len(marginal) + 1), marginal, marker="o", label=f"{arm} marginal")
        if conditional:
            ax.plot(
                range(1, len(conditional) + 1),
                [math.nan if c is None else c for c in conditional],
                marker="x",
                linestyle="--",
                color=line.get_color(),
                label=f"{arm} conditional",
            )
    ax.set_xticks(range(1, max(len(m) for m, _ in curves.values()) + 1))
    ax.set_xlabel("draft position")
    ax.set_ylabel("acceptance rate")
    ax.set_ylim(-0.04, 1.04)
    ax.set_title(
        "per-position acceptance: marginal (solid) and conditional on the one before (dashed)", fontsize=9
    )
    _legend(ax, fontsize=8)
    return _png(fig)


def tpot_figure(samples: dict[str, list[RequestRecord]]) -> str | None:
    """TPOT distribution per arm, over every successful measured request."""
    data, labels = [], []
    for arm, records in samples.items():
        values = [r.tpot_s * 1000 for r in records if r.ok and r.tpot_s is not None]
        if values:
            data.append(values)
            labels.append(arm)
    if not data:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    ax.boxplot(data)
    _arm_labels(ax, list(range(1, len(labels) + 1)), labels)
    ax.set_ylabel("TPOT (ms)")
    ax.set_title("TPOT per request, all windows")
    return _png(fig)


def power_figure(windows: dict[str, list[WindowRecord]]) -> str | None:
    """Power over each measured window, per arm (time from the window's first sample)."""
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    plotted = False
    for arm, records in windows.items():
        for window in records:
            samples = [s for s in (window.power.samples if window.power else []) if s[1] is not None]
            if len(samples) > 1:
                t0 = samples[0][0]
                ax.plot(
                    [s[0] - t0 for s in samples],
                    [s[1] for s in samples],
                    linewidth=0.8,
                    label=f"{arm} / {window.workload} {window.level.short()}",
                )
                plotted = True
    if not plotted:
        plt.close(fig)
        return None
    ax.set_xlabel("seconds into the window")
    ax.set_ylabel("power (W)")
    ax.set_title("power over time")
    _legend(ax, fontsize=6)
    return _png(fig)


def ramp_figure(ramps: dict[str, tuple[list[RampWindowRecord], list[RequestRecord]]]) -> str | None:
    """The ramp (``load.ramp``), per arm: tok/s in 1-second bins averaged over the start-ups (top),
    and each request's TPOT at the time it was sent (bottom), the stage boundaries marked."""
    first = next((windows[0] for windows, _ in ramps.values() if windows), None)
    if first is None:
        return None
    bounds = first.stage_bounds()
    end = bounds[-1][1]
    bin_s = max(1.0, end / 120)
    edges = [i * bin_s for i in range(int(end / bin_s) + 1)]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7.2, 4.8), sharex=True)
    for arm, (windows, records) in ramps.items():
        if not windows:
            continue
        per_start = [[r for r in records if r.repeat == w.repeat] for w in windows]
        rates = [
            sum(ramp.tokens_between(mine, a, a + bin_s) for mine in per_start) / (bin_s * len(per_start))
            for a in edges[:-1]
        ]
        top.step(edges[:-1], rates, where="post", linewidth=0.9, label=arm)
        sent = [
            (r.t_send, r.tpot_s * 1000) for r in records if r.ok and r.tpot_s is not None and r.t_send < end
        ]
        bottom.scatter([t for t, _ in sent], [v for _, v in sent], s=4, alpha=0.5, label=arm)
    for ax in (top, bottom):
        for start, _ in bounds[1:]:
            ax.axvline(start, color="grey", linewidth=0.6, linestyle=":")
    for (start, stop), stage in zip(bounds, first.stages, strict=True):
        top.text(
            (start + stop) / 2,
            1.0,
            stage.label(),
            transform=top.get_xaxis_transform(),
            ha="center",
            va="bottom",
            fontsize=7,
        )
    top.set_ylabel("output tok/s")
    bottom.set_ylabel("TPOT (ms), at send")
    bottom.set_xlabel("seconds into the ramp")
    _legend(top)
    return _png(fig)


def trend_figure(series: list[Series], title: str, band_nights: int, band_confidence: float) -> str | None:
    """One arm's metric over the nights, one line per cell: each night with its own interval (a
    speedup: the one its run stored), the band a night with no change falls in (the history gate's
    prediction interval, at ``band_confidence``) over the last nights, and each change point marked
    at its night with the step."""
    drawn = [s for s in series if s.nights]
    if not drawn:
        return None
    fig, ax = plt.subplots(figsize=(7.2, 3.0))
    for line in drawn:
        xs = [n.started_at[:10] for n in line.nights]
        ys = [n.value for n in line.nights]
        errors = [
            [n.value - n.low if n.low is not None else 0.0 for n in line.nights],
            [n.high - n.value if n.high is not None else 0.0 for n in line.nights],
        ]
        handle = ax.errorbar(range(len(xs)), ys, yerr=errors, marker="o", markersize=3, linewidth=0.9,
                             capsize=2, label=line.key.cell)  # fmt: skip
        colour = handle[0].get_color()
        if line.band is not None:  # over the nights it comes from: the gate's reference for the next
            start = max(0, len(xs) - band_nights)
            ax.fill_between([start - 0.3, len(xs) - 0.7], *line.band, color=colour, alpha=0.1, linewidth=0)
        for point in line.changes:
            at = next(i for i, n in enumerate(line.nights) if n.run_id == point.run_id)
            ax.axvline(at - 0.5, color="#b00020", linewidth=0.9, linestyle="--")
            ax.annotate(f"{100 * point.change:+.1f}%", (at - 0.5, ys[at]), textcoords="offset points",
                        xytext=(3, 6), fontsize=7, color="#b00020")  # fmt: skip
    # the axis holds the nights and the bands, not the intervals: two start-ups give a t interval 12.7
    # standard errors wide, and one such bar would flatten every night to a line at the bottom
    shown = [v for line in drawn for v in [*(n.value for n in line.nights), *(line.band or ())]]
    low, high = min(shown), max(shown)
    margin = 0.15 * (high - low) or 0.05 * abs(high) or 1.0
    ax.set_ylim(low - margin, high + margin)
    nights = max(drawn, key=lambda s: len(s.nights)).nights
    same_day = len({n.started_at[:10] for n in nights}) < len(nights)  # several runs a day: their times
    labels = [n.started_at[5:16] if same_day else n.started_at[:10] for n in nights]
    step = max(1, len(labels) // 10)
    ax.set_xticks(range(0, len(labels), step), labels[::step], rotation=30, ha="right", fontsize=7)
    ax.set_title(f"{title} (band: {100 * band_confidence:.0f}% prediction interval)", fontsize=9)
    _legend(ax)
    return _png(fig)
