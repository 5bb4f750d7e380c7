"""The mini-lab table in the terminal: arms x metrics, one table per workload and concurrency."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.table import Table


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _speedup(value: float | None) -> str:
    if value is None:
        return "-"
    colour = "green" if value > 1.0 else ("red" if value < 1.0 else "")
    text = f"{value:.2f}x"
    return f"[{colour}]{text}[/]" if colour else text


def minilab_tables(summary: dict[str, Any]) -> list[Table]:
    """One rich table per (workload, concurrency), rows in the regime's arm order."""
    tables = []
    keys = list(dict.fromkeys((w["workload"], w["concurrency"]) for w in summary["windows"]))
    for workload, concurrency in keys:
        rows = [w for w in summary["windows"] if (w["workload"], w["concurrency"]) == (workload, concurrency)]
        first = rows[0]
        table = Table(
            title=f"{workload} ({first['category']}, {first['prompt_format']} prompts) @ concurrency {concurrency}; times in ms",
            title_justify="left",
            box=box.SIMPLE_HEAD,  # light borders: the table fits an 80-column terminal
            pad_edge=False,
            collapse_padding=True,
        )
        for header in ("arm", "method", "tau", "tok/s", "speedup", "TTFT\np50", "TPOT\np50", "TPOT\np90", "$/Mtok", "ok", "same\n%"):
            # fold, never truncate: a number cut to "12…" is worse than a wrapped one
            text_column = header in ("arm", "method")
            table.add_column(header, justify="left" if text_column else "right", overflow="fold", no_wrap=text_column,
                             min_width=max(len(part) for part in header.split("\n")))
        for row in rows:
            table.add_row(
                row["arm"],
                row["method"] + (f" K={row['num_speculative_tokens']}" if row["num_speculative_tokens"] else ""),
                "1" if row["method"] == "baseline" else _fmt(row["tau"], ".2f"),
                _fmt(row["output_tok_s"], ".1f"),
                _speedup(row["speedup"]),
                _fmt(row["ttft_ms_p50"], ".0f"),
                _fmt(row["tpot_ms_p50"], ".1f"),
                _fmt(row["tpot_ms_p90"], ".1f"),
                _fmt(row["usd_per_mtok"], ".2f"),
                f"{row['requests_ok']}/{row['requests_total']}",
                _fmt((row.get("exactness") or {}).get("identical_pct"), ".0f"),
            )
        tables.append(table)
    return tables


def category_table(summary: dict[str, Any]) -> Table | None:
    """Speculative arms per category: tau (over all concurrency levels), exactness, and speedup at
    each level; categories ordered by the first speculative arm's tau, so the ordering shows."""
    rows = [r for r in summary.get("categories") or [] if r["method"] != "baseline"]
    if not rows:
        return None
    levels = sorted({r["concurrency"] for r in rows})
    arms = list(dict.fromkeys(r["arm"] for r in rows))
    pooled: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        entry = pooled.setdefault((r["category"], r["arm"]), {"drafts": 0.0, "accepted": 0.0, "pairs": 0, "same": 0.0, "speedup": {}})
        entry["drafts"] += r["drafts"]
        entry["accepted"] += r["accepted_tokens"]
        if r["identical_pct"] is not None:
            entry["pairs"] += r["exactness_pairs"]
            entry["same"] += r["identical_pct"] * r["exactness_pairs"] / 100
        entry["speedup"][r["concurrency"]] = r["speedup"]

    def tau(category: str, arm: str) -> float | None:
        entry = pooled.get((category, arm))
        return 1 + entry["accepted"] / entry["drafts"] if entry and entry["drafts"] else None

    categories = sorted({c for c, _ in pooled}, key=lambda c: -(tau(c, arms[0]) or 0))
    table = Table(title=f"per category (ordered by {arms[0]} tau; tau over all concurrency levels)",
                  title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for header in ["category", "arm", "tau", "same\n%"] + [f"speedup\n@{level}" for level in levels]:
        text_column = header in ("category", "arm")
        table.add_column(header, justify="left" if text_column else "right", overflow="fold", no_wrap=text_column)
    for category in categories:
        for arm in arms:
            entry = pooled.get((category, arm))
            if entry is None:
                continue
            same = 100 * entry["same"] / entry["pairs"] if entry["pairs"] else None
            table.add_row(category, arm, _fmt(tau(category, arm), ".2f"), _fmt(same, ".0f"),
                          *(_speedup(entry["speedup"].get(level)) for level in levels))
    return table


def drafter_lines(summary: dict[str, Any]) -> list[str]:
    """One line per arm with a drafter: its tau belongs to that drafter as much as to the method."""
    return [f"{arm['name']}: drafter {drafter_note(arm['drafter'])}" for arm in summary["arms"] if arm.get("drafter")]


def drafter_note(drafter: dict[str, Any]) -> str:
    """A drafter's label and reference, and for one trained here how many of the measured prompts
    it was trained on (0 unless someone pointed a regime at its training prompts)."""
    text = f"{drafter['label']} ({drafter['reference']})"
    held_out = drafter.get("held_out")
    if held_out:
        text += f"; trained on {held_out['trained_on']} of the {held_out['measured_prompts']} measured prompts"
        if held_out["trained_on"]:
            text += " (its tau is flattered: those prompts are not held out)"
    return text


def failed_arms(summary: dict[str, Any]) -> list[dict[str, Any]]:
    return [arm for arm in summary["arms"] if arm.get("status") != "ok"]


def exactness_table(summary: dict[str, Any]) -> Table | None:
    """Per arm: share of prompts whose greedy output is identical to the baseline's, and why not."""
    section = summary.get("exactness") or {}
    if not section.get("applicable"):
        return None
    blocks = [(name, block) for name, block in section["arms"].items()]
    if section.get("noise_floor"):
        blocks.insert(0, (f"{summary['baseline_arm']} (2nd pass)", section["noise_floor"]))
    table = Table(
        title=f"greedy exactness vs {summary['baseline_arm']}, same prompt and concurrency "
        f"(near tie: top-2 margin < {section['near_tie_margin']} nats)",
        title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True,
    )
    for header in ("arm", "pairs", "identical\n%", "near_tie\n%", "diverged\n%", "unknown\n%", "first divergences\nprompt@position(status)"):
        text_column = header in ("arm",) or header.startswith("first")
        table.add_column(header, justify="left" if text_column else "right", overflow="fold", no_wrap=header == "arm")
    for name, block in blocks:
        firsts = [
            f"{e['prompt_id']}@{e['position']}({e['status']})" for e in block["prompts"] if e["status"] != "identical"
        ]
        table.add_row(
            name, str(block["compared"]),
            *(_fmt(block[f"{status}_pct"], ".0f") for status in ("identical", "near_tie", "diverged", "unknown")),
            ", ".join(firsts[:4]) + (f" +{len(firsts) - 4} more" if len(firsts) > 4 else ""),
        )
    return table
