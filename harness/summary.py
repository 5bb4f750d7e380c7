"""Derive the summary (the mini-lab table's numbers) from a run directory's raw files.

Raw samples are the truth; this module can be re-run on any run directory and gives the same
summary. Units are in the names (``_ms``, ``_s``, ``tok_s``).
"""

from __future__ import annotations

from typing import Any

from harness.probes.acceptance import SpecCounters, acceptance, request_counters
from harness.probes.cost import usd_per_mtok
from harness.probes.exactness import compare_records, shares
from harness.probes.latency import percentile, tpot_s, ttft_s
from harness.probes.power import combine_power, summarize_power
from harness.probes.throughput import output_tokens_per_s, speedup
from harness.results import SCHEMA_VERSION, RunDir, read_json, read_jsonl, read_run_record


def _ms(value: float | None) -> float | None:
    return None if value is None else value * 1000.0


def window_counters(window: dict[str, Any], records: list[dict[str, Any]]) -> SpecCounters:
    """The window's draft counters: scrape deltas (vLLM), or the sum of each request's own
    details (SGLang); the same quantities either way, so tau has one definition."""
    if window.get("acceptance_source", "server_counters") == "per_request":
        return request_counters([r["spec_details"] for r in records if r.get("spec_details")])
    return SpecCounters.from_json(window["counters_after"]).minus(SpecCounters.from_json(window["counters_before"]))


def cell_metrics(
    windows: list[dict[str, Any]], records: list[dict[str, Any]], price_per_hour: float, usd_per_kwh: float | None = None
) -> dict[str, Any]:
    """Metrics of one (workload, concurrency) cell from its raw records and counter scrapes, pooled
    over the cell's repeats (tokens and time add up, counters add up, latencies are pooled per
    request); ``per_repeat`` keeps each repeat's own window-level numbers for the gates."""
    ok = [r for r in records if r["error"] is None]
    output_tokens = sum(len(r["token_ids"]) for r in ok)
    ttfts = [v for r in ok if (v := ttft_s(r["t_send"], r["t_first_token"])) is not None]
    tpots = [
        v for r in ok if (v := tpot_s(r["t_send"], r["t_first_token"], r["t_done"], len(r["token_ids"]))) is not None
    ]
    duration = sum(w["duration_s"] for w in windows)
    tok_s = output_tokens_per_s(output_tokens, duration)
    counters, per_repeat, power = SpecCounters(), [], []
    for window in windows:
        repeat = window.get("repeat", 0)
        mine = [r for r in ok if r.get("repeat", 0) == repeat]
        delta = window_counters(window, mine)
        counters = counters.plus(delta)
        tokens = sum(len(r["token_ids"]) for r in mine)
        repeat_tok_s = output_tokens_per_s(tokens, window["duration_s"])
        per_repeat.append({
            "repeat": repeat, "duration_s": window["duration_s"], "output_tokens": tokens, "output_tok_s": repeat_tok_s,
            "tau": acceptance(delta).tau, "usd_per_mtok": usd_per_mtok(price_per_hour, repeat_tok_s),
        })
        power.append(summarize_power((window.get("power") or {}).get("samples"), tokens))
    acc = acceptance(counters)
    power_info = windows[0].get("power") or {}
    return {
        "repeats": len(windows),
        "requests_total": len(records),
        "requests_ok": len(ok),
        "requests_errored": len(records) - len(ok),
        "output_tokens": output_tokens,
        "duration_s": duration,
        "output_tok_s": tok_s,
        "ttft_ms_p50": _ms(percentile(ttfts, 50)),
        "ttft_ms_p90": _ms(percentile(ttfts, 90)),
        "tpot_ms_p50": _ms(percentile(tpots, 50)),
        "tpot_ms_p90": _ms(percentile(tpots, 90)),
        "acceptance_source": windows[0].get("acceptance_source", "server_counters"),
        # the engine's own server-wide figure after the cell's last window, labelled, never tau
        "server_reported": windows[-1].get("server_reported"),
        "tau": acc.tau,
        "acceptance_rate": acc.acceptance_rate,
        "per_position_acceptance": acc.per_position,
        "drafts": acc.drafts,
        "draft_tokens": acc.draft_tokens,
        "accepted_tokens": acc.accepted_tokens,
        "usd_per_mtok": usd_per_mtok(price_per_hour, tok_s),
        **_power_metrics(power_info, combine_power(power, output_tokens), usd_per_kwh),
        "per_repeat": per_repeat,
    }


def _power_metrics(power: dict[str, Any], stats: dict[str, Any], usd_per_kwh: float | None) -> dict[str, Any]:
    j_per_token = stats["j_per_token"]
    return {
        "power_source": power.get("source"),
        "power_note": power.get("note", "not recorded"),
        **{k: v for k, v in stats.items() if k != "duration_s"},
        # J/token x 1e6 tokens / 3.6e6 J per kWh x $/kWh
        "energy_usd_per_mtok": j_per_token * 1e6 / 3.6e6 * usd_per_kwh if j_per_token is not None and usd_per_kwh else None,
    }


def _exactness_block(entries: list[dict[str, Any]], reference: str) -> dict[str, Any]:
    return {"reference": reference, **shares([e["status"] for e in entries]), "prompts": entries}


def exactness(run: RunDir, regime: dict[str, Any], baseline: str, near_tie_margin: float) -> dict[str, Any]:
    """Per speculative arm: its outputs vs the baseline's; plus the baseline's own noise floor."""
    reference = read_jsonl(run.samples(baseline))
    arms = {
        arm["name"]: _exactness_block(compare_records(reference, read_jsonl(run.samples(arm["name"])), near_tie_margin), baseline)
        for arm in regime["arms"] if arm["name"] != baseline
    }
    repeat = read_jsonl(run.noise_floor(baseline))
    noise = _exactness_block(compare_records(reference, repeat, near_tie_margin), f"{baseline} (first pass)") if repeat else None
    return {
        "applicable": True,
        "near_tie_margin": near_tie_margin,
        "pairing": "same workload, same prompt, same concurrency level; greedy, same seed and max tokens",
        "arms": arms,
        "noise_floor": noise,
    }


def _add_window_exactness(rows: list[dict[str, Any]], section: dict[str, Any], baseline: str) -> None:
    blocks = dict(section["arms"]) if section.get("applicable") else {}
    if section.get("noise_floor"):
        blocks[baseline] = section["noise_floor"]
    for row in rows:
        entries = [
            e for e in (blocks.get(row["arm"]) or {}).get("prompts", [])
            if (e["workload"], e["concurrency"]) == (row["workload"], row["concurrency"])
        ]
        row["exactness"] = shares([e["status"] for e in entries]) if entries else None


def summarize(run: RunDir) -> dict[str, Any]:
    """The summary of a run directory, from its raw files only."""
    regime_record = read_run_record(run)
    regime = regime_record["regime"]
    price = regime_record["price_per_hour"]
    drafters = regime_record.get("drafters") or {}
    arms, rows = [], []
    for arm in regime["arms"]:
        name = arm["name"]
        status = read_json(run.status(name)) if run.status(name).exists() else {"status": "not_run"}
        drafter = drafters.get(name)
        arms.append({"name": name, "method": arm["method"], "num_speculative_tokens": arm["num_speculative_tokens"],
                     "drafter": drafter, **status})
        samples = read_jsonl(run.samples(name))
        cells: dict[tuple[str, int], list[dict[str, Any]]] = {}
        for window in read_jsonl(run.windows(name)):  # a cell's repeats, in the order measured
            cells.setdefault((window["workload"], window["concurrency"]), []).append(window)
        for (workload, concurrency), windows in cells.items():
            records = [s for s in samples if s["workload"] == workload and s["concurrency"] == concurrency]
            rows.append({
                "arm": name,
                "method": arm["method"],
                "num_speculative_tokens": arm["num_speculative_tokens"],
                "drafter": drafter["label"] if drafter else None,
                "workload": workload,
                "category": windows[0]["category"],
                "prompt_format": windows[0]["prompt_format"],
                "concurrency": concurrency,
                **cell_metrics(windows, records, price, regime["cost"].get("usd_per_kwh")),
            })
    baseline = next(a["name"] for a in regime["arms"] if a["method"] == "baseline")
    _add_speedups(rows, baseline=baseline)
    if regime["exactness"]["enabled"] and regime["sampling"]["temperature"] == 0:
        section = exactness(run, regime, baseline, regime_record["near_tie_margin"])
    else:
        section = {"applicable": False, "reason": "exactness is disabled or the regime does not decode greedily"}
    _add_window_exactness(rows, section, baseline)
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": run.root.name,
        "regime_name": regime["name"],
        "regime_fingerprint": regime_record["fingerprint"],
        "baseline_arm": baseline,
        "mismatches": regime_record.get("mismatches", []),
        "lossy_settings": regime_record.get("lossy_settings", []),
        "arms": arms,
        "windows": rows,
        "categories": category_rows(rows, baseline),
        "exactness": section,
    }


def category_rows(rows: list[dict[str, Any]], baseline: str) -> list[dict[str, Any]]:
    """Per (arm, category, concurrency), pooled over the workloads of that category: tokens and
    time add up, tau from the summed draft counts, exactness over all their prompts."""
    groups: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["arm"], row["category"], row["concurrency"]), []).append(row)
    out = []
    for (arm, category, concurrency), members in groups.items():
        drafts = sum(m["drafts"] for m in members)
        accepted = sum(m["accepted_tokens"] for m in members)
        compared = [m["exactness"] for m in members if m.get("exactness")]
        pairs = sum(e["compared"] for e in compared)
        identical = sum(e["compared"] * (e["identical_pct"] or 0) / 100 for e in compared)
        out.append({
            "arm": arm,
            "method": members[0]["method"],
            "num_speculative_tokens": members[0]["num_speculative_tokens"],
            "category": category,
            "concurrency": concurrency,
            "workloads": [m["workload"] for m in members],
            "output_tok_s": output_tokens_per_s(sum(m["output_tokens"] for m in members),
                                                sum(m["duration_s"] for m in members)),
            "tau": 1.0 + accepted / drafts if drafts > 0 else None,
            "drafts": drafts,
            "accepted_tokens": accepted,
            "identical_pct": 100.0 * identical / pairs if pairs else None,
            "exactness_pairs": pairs,
        })
    base = {(r["category"], r["concurrency"]): r["output_tok_s"] for r in out if r["arm"] == baseline}
    for row in out:
        row["speedup"] = speedup(row["output_tok_s"], base.get((row["category"], row["concurrency"])))
    return out


def _add_speedups(rows: list[dict[str, Any]], baseline: str) -> None:
    """Speedup of the pooled cell, and per repeat against the baseline's same repeat."""
    base = {(r["workload"], r["concurrency"]): r for r in rows if r["arm"] == baseline}
    for row in rows:
        reference = base.get((row["workload"], row["concurrency"]))
        row["speedup"] = speedup(row["output_tok_s"], reference["output_tok_s"] if reference else None)
        base_repeats = {r["repeat"]: r["output_tok_s"] for r in reference["per_repeat"]} if reference else {}
        for entry in row["per_repeat"]:
            entry["speedup"] = speedup(entry["output_tok_s"], base_repeats.get(entry["repeat"]))
