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
from harness.probes.power import summarize_power
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


def window_metrics(
    window: dict[str, Any], records: list[dict[str, Any]], price_per_hour: float, usd_per_kwh: float | None = None
) -> dict[str, Any]:
    """Metrics of one measured window from its raw request records and counter scrapes."""
    ok = [r for r in records if r["error"] is None]
    output_tokens = sum(len(r["token_ids"]) for r in ok)
    ttfts = [v for r in ok if (v := ttft_s(r["t_send"], r["t_first_token"])) is not None]
    tpots = [
        v for r in ok if (v := tpot_s(r["t_send"], r["t_first_token"], r["t_done"], len(r["token_ids"]))) is not None
    ]
    tok_s = output_tokens_per_s(output_tokens, window["duration_s"])
    acc = acceptance(window_counters(window, ok))
    return {
        "requests_total": len(records),
        "requests_ok": len(ok),
        "requests_errored": len(records) - len(ok),
        "output_tokens": output_tokens,
        "duration_s": window["duration_s"],
        "output_tok_s": tok_s,
        "ttft_ms_p50": _ms(percentile(ttfts, 50)),
        "ttft_ms_p90": _ms(percentile(ttfts, 90)),
        "tpot_ms_p50": _ms(percentile(tpots, 50)),
        "tpot_ms_p90": _ms(percentile(tpots, 90)),
        "acceptance_source": window.get("acceptance_source", "server_counters"),
        "tau": acc.tau,
        "acceptance_rate": acc.acceptance_rate,
        "per_position_acceptance": acc.per_position,
        "drafts": acc.drafts,
        "draft_tokens": acc.draft_tokens,
        "accepted_tokens": acc.accepted_tokens,
        "usd_per_mtok": usd_per_mtok(price_per_hour, tok_s),
        **_power_metrics(window.get("power"), output_tokens, usd_per_kwh),
    }


def _power_metrics(power: dict[str, Any] | None, output_tokens: int, usd_per_kwh: float | None) -> dict[str, Any]:
    stats = summarize_power((power or {}).get("samples"), output_tokens)
    j_per_token = stats["j_per_token"]
    return {
        "power_source": (power or {}).get("source"),
        "power_note": (power or {}).get("note", "not recorded"),
        **stats,
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
        for window in read_jsonl(run.windows(name)):
            records = [
                s for s in samples if s["workload"] == window["workload"] and s["concurrency"] == window["concurrency"]
            ]
            rows.append({
                "arm": name,
                "method": arm["method"],
                "num_speculative_tokens": arm["num_speculative_tokens"],
                "drafter": drafter["label"] if drafter else None,
                "workload": window["workload"],
                "category": window["category"],
                "prompt_format": window["prompt_format"],
                "concurrency": window["concurrency"],
                **window_metrics(window, records, price, regime["cost"].get("usd_per_kwh")),
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
        "exactness": section,
    }


def _add_speedups(rows: list[dict[str, Any]], baseline: str) -> None:
    base = {(r["workload"], r["concurrency"]): r["output_tok_s"] for r in rows if r["arm"] == baseline}
    for row in rows:
        row["speedup"] = speedup(row["output_tok_s"], base.get((row["workload"], row["concurrency"])))
