"""The verdict, the findings paragraph and the lab table: pure functions of the typed summary.

The summaries here are the stored v1 fixture (a real run: baseline and ngram K=4, two workloads,
concurrency 1 and 2), with numbers changed where a test needs another answer: every sentence must
change when the numbers it names change.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.core.errors import UserError
from harness.core.probes.copying import CopyCounts, copied_ngrams, share_pct
from harness.derive.analysis import analyze
from harness.derive.findings import findings
from harness.derive.summary import summarize
from harness.derive.verdict import run_caveats, window_verdicts
from harness.present.table import answer_lines, lab_markdown
from harness.present.verdict_text import caveat_text, findings_text, provisional_text, verdict_line
from harness.results.model import CellMetrics, SpeedupEstimate, Summary
from harness.run.client import RequestRecord, _absorb_chunk


def _findings(summary):  # the facts, worded as the views word them
    return findings_text(findings(summary, window_verdicts(summary)))


GOLDEN = Path(__file__).parent / "fixtures" / "run_v1"


@pytest.fixture(scope="module")
def summary() -> Summary:
    return summarize(GOLDEN)


def with_cells(summary: Summary, **updates_by_key: dict) -> Summary:
    """The summary with some cells changed; keys are 'arm/workload/concurrency'."""
    cells = []
    for cell in summary.cells:
        update = updates_by_key.get(f"{cell.arm}/{cell.workload}/{cell.concurrency}")
        if update and "estimate" in update:  # the stored estimate's fields it changes
            stored = cell.estimate or SpeedupEstimate()
            update = {**update, "estimate": stored.model_copy(update=update["estimate"])}
        cells.append(cell.model_copy(update=update) if update else cell)
    return summary.model_copy(update={"cells": cells})


def ngram(summary: Summary, workload: str, concurrency: int) -> CellMetrics:
    found = summary.cell("ngram_k4", workload, concurrency)
    assert found is not None
    return found


# ---- probes -----------------------------------------------------------------------------------


def test_copy_and_context_shares_count_output_ngrams_found_before() -> None:
    prompt = [1, 2, 3, 4, 5]
    # (2,3,4) is in the prompt; (3,4,9) and (4,9,9) are not; (9,9,9) twice: the second time it
    # repeats the output itself, which a prompt-lookup drafter searches too
    counts = copied_ngrams(prompt, [2, 3, 4, 9, 9, 9, 9])
    assert counts == (1, 2, 5)
    assert copied_ngrams(prompt, [1, 2]) == (0, 0, 0)  # shorter than one n-gram
    assert copied_ngrams([], [1, 2, 3]) == (0, 0, 0)  # no prompt ids: nothing counted, not "0% copied"
    assert share_pct([counts, CopyCounts(3, 3, 3)]) == pytest.approx(100 * 4 / 8)  # pooled, like tau
    assert share_pct([counts, CopyCounts(3, 3, 3)], "from_context") == pytest.approx(100 * 5 / 8)
    assert share_pct([CopyCounts(0, 0, 0)]) is None


def test_client_keeps_the_prompt_token_ids_of_either_endpoint() -> None:
    chat = RequestRecord("w", "p", 1, "chat")
    _absorb_chunk(
        chat, {"prompt_token_ids": [5, 6, 7], "choices": [{"delta": {"content": "a"}, "token_ids": [1]}]}, 0.1
    )
    _absorb_chunk(chat, {"choices": [{"delta": {"content": "b"}, "token_ids": [2]}]}, 0.2)
    assert chat.prompt_token_ids == [5, 6, 7] and chat.token_ids == [1, 2]
    raw = RequestRecord("w", "p", 1, "raw")
    _absorb_chunk(raw, {"choices": [{"text": "a", "token_ids": [1], "prompt_token_ids": [8, 9]}]}, 0.1)
    assert raw.prompt_token_ids == [8, 9]


# ---- verdict ----------------------------------------------------------------------------------


def test_verdict_follows_the_interval(summary: Summary) -> None:
    changed = with_cells(
        summary,
        **{
            "ngram_k4/code_humaneval/1": {
                "speedup": 1.6,
                "estimate": {"low": 1.4, "high": 1.8, "source": "server_starts", "df": 4},
                "usd_per_mtok": 2.0,
            },
            "ngram_k4/code_humaneval/2": {
                "speedup": 0.8,
                "estimate": {"low": 0.7, "high": 0.9, "source": "server_starts"},
            },
            "ngram_k4/chat_mtbench/1": {
                "speedup": 1.05,
                "estimate": {"low": 0.95, "high": 1.15, "source": "server_starts"},
            },
        },
    )
    verdicts = {(v.workload, v.concurrency): v for v in window_verdicts(changed)}
    pays = verdicts[("code_humaneval", 1)]
    assert pays.outcome == "pays" and pays.fastest == "ngram_k4"
    assert pays.saving_pct == pytest.approx(100 * (3.36 - 2.0) / 3.36, abs=0.2)
    assert verdict_line(pays).startswith(
        "code_humaneval @1: ngram_k4 pays: 1.60x faster (95%: 1.40-1.80x) on 2 code prompts at "
        "concurrency 1; $/Mtok 3.36 -> 2.00 (-41%)"
    )
    assert "outputs identical 2/2" in verdict_line(pays)
    loses = verdicts[("code_humaneval", 2)]
    assert loses.outcome == "loses" and loses.fastest == "baseline"
    assert verdict_line(loses).startswith(
        "code_humaneval @2: ngram_k4 loses: 0.80x, slower than the baseline (95%: 0.70-0.90x)"
    )
    spans = verdicts[("chat_mtbench", 1)]
    assert spans.outcome == "indistinguishable" and "too noisy to tell: ngram_k4 1.05x" in verdict_line(spans)
    no_interval = verdicts[("chat_mtbench", 2)]
    assert no_interval.outcome == "unverified" and no_interval.deploy == "baseline"
    assert "unverified: ngram_k4 0.99x (slower) on 2 chat prompts" in verdict_line(no_interval)
    assert pays.deploy == "ngram_k4" and spans.deploy == "baseline"


def test_a_noisy_neighbour_makes_the_verdict_provisional_and_a_draining_window_is_flagged(
    summary: Summary,
) -> None:
    noisy = with_cells(
        summary,
        **{
            "baseline/code_humaneval/2": {
                "noisy_neighbour": True,
                "others_cpu_cores": 0.95,
                "steal_share": 0.0,
            },
            "ngram_k4/code_humaneval/2": {"mean_in_flight": 1.7},  # the baseline's: 1.98
        },
    )
    verdict = {(v.workload, v.concurrency): v for v in window_verdicts(noisy)}[("code_humaneval", 2)]
    assert verdict_line(verdict).startswith(
        "PROVISIONAL (measured beside a busy neighbour: baseline: other processes 0.95 cores"
    )
    assert (
        "effective load differs: baseline averaged 1.98 requests in flight, ngram_k4 1.70 (stated 2)"
        in verdict_line(verdict)
    )


def test_caveats_are_never_hidden(summary: Summary) -> None:
    arms = [
        a.model_copy(update={"drafter": {"label": "untrained, mechanics only", "reference": "random init"}})
        if a.name == "ngram_k4"
        else a
        for a in summary.arms
    ]
    floor = summary.exactness.noise_floor.model_copy(update={"identical_pct": 75.0})  # type: ignore[union-attr]
    exactness = summary.exactness.model_copy(update={"noise_floor": floor})
    changed = summary.model_copy(
        update={"arms": arms, "exactness": exactness, "lossy_settings": ["x allowed"]}
    )
    verdict = window_verdicts(changed)[0]
    assert [c.code for c in verdict.caveats] == ["drafter_mechanics"]  # a code with its values
    assert "[ngram_k4: untrained, mechanics only]" in verdict_line(verdict)
    caveats = [caveat_text(c) for c in run_caveats(changed)]
    assert any(c.startswith("noise floor: the baseline reproduced itself on 75%") for c in caveats)
    assert "lossy acceptance allowed: x allowed" in caveats
    assert any("regime mismatch" in c for c in caveats)  # the fixture ran with --allow-mismatch
    failed = changed.model_copy(update={"arms": [a.model_copy(update={"status": "failed"}) for a in arms]})
    assert "arm ngram_k4 is failed: not in any verdict" in map(caveat_text, run_caveats(failed))


def test_failed_requests_are_a_caveat_of_the_run(summary: Summary) -> None:
    assert not [c for c in run_caveats(summary) if c.code == "failed_requests"]
    cell = next(c for c in summary.cells if c.arm == "ngram_k4")
    cells = [c.model_copy(update={"requests_errored": 2}) if c is cell else c for c in summary.cells]
    total = sum(c.requests_total for c in summary.cells_of("ngram_k4"))
    caveats = [caveat_text(c) for c in run_caveats(summary.model_copy(update={"cells": cells}))]
    assert (
        f"arm ngram_k4: 2 of {total} requests failed ({cell.workload} {cell.level.short()}: 2); its figures "
        "count only the completed ones, and no window where more than 10% of the requests failed (the "
        "errors are in its samples.jsonl)"
    ) in caveats


# ---- findings ---------------------------------------------------------------------------------


def test_findings_change_with_the_numbers(summary: Summary) -> None:
    def shares(code: tuple[float, float], chat: tuple[float, float]) -> dict:
        return {
            "baseline/code_humaneval/1": {"copy_share_pct": code[0], "context_share_pct": code[1]},
            "baseline/chat_mtbench/1": {"copy_share_pct": chat[0], "context_share_pct": chat[1]},
        }

    # the fixture's ngram tau: 2.94 on code, 3.64 on chat
    with_copy = with_cells(summary, **shares((40.0, 45.0), (10.0, 50.0)))
    text = " ".join(_findings(with_copy))
    assert (
        "code_humaneval: 40% in the prompt, 45% in the prompt or earlier output, tau 2.94; "
        "chat_mtbench: 10% in the prompt, 50% in the prompt or earlier output, tau 3.64." in text
    )
    assert (
        "Tau follows the share found in the prompt or the earlier output (rank correlation 1.00 over 2"
        in text
    )
    swapped = " ".join(_findings(with_cells(summary, **shares((5.0, 6.0), (30.0, 31.0)))))
    assert (
        "Tau rises with the share copied from the prompt (rank correlation 1.00 over 2 workloads)" in swapped
    )
    neither = " ".join(_findings(with_cells(summary, **shares((40.0, 60.0), (10.0, 20.0)))))
    assert "Neither share explains tau (rank correlation -1.00 with the prompt share, -1.00 with" in neither
    # high tau without a speedup: verification, not acceptance, is the limit
    # each step's cost follows the output tokens per target forward (1.57 here), not tau
    assert (
        "turns tau 3.64 into 1.03x (unverified) on chat_mtbench @1: each of its steps (1.57 tokens per "
        "target forward) costs 1.5 baseline decode steps" in text
    )
    # a step cheaper than a baseline decode step cannot be: the finding says what it saw instead
    cheap = " ".join(_findings(with_cells(with_copy, **{"ngram_k4/chat_mtbench/1": {"speedup": 2.0}})))
    assert "costs 0.8 baseline decode steps" not in cheap and (
        "ngram_k4's 2.00x (unverified) on chat_mtbench @1 is more than its 1.57 tokens per step allow (a "
        "speculative step costs at least one target forward, so at most 1.57x)" in cheap
    )
    slow = with_cells(with_copy, **{"ngram_k4/chat_mtbench/1": {"speedup": 0.5}})
    assert (
        "Verification, not acceptance, is ngram_k4's limit in this regime: it emits 3.64 tokens per step on "
        "chat_mtbench @1 yet runs at 0.50x (unverified), so each of its steps (1.57 tokens per target "
        "forward) costs 3.1 baseline decode steps" in " ".join(_findings(slow))
    )
    counted = with_cells(slow, **{"ngram_k4/chat_mtbench/1": {"speedup": 0.5, "tokens_per_forward": 2.1}})
    assert (
        "so each of its steps (2.10 tokens per target forward) costs 4.2 baseline decode steps"
        in " ".join(_findings(counted))
    )
    untracked = with_cells(slow, **{"ngram_k4/chat_mtbench/1": {"speedup": 0.5, "tokens_per_forward": None}})
    assert "so each of its steps costs 7.3 baseline decode steps" in " ".join(_findings(untracked))  # tau
    low_tau = with_cells(
        summary,
        **{f"ngram_k4/{w}/{c}": {"tau": 1.05} for w in ("code_humaneval", "chat_mtbench") for c in (1, 2)},
    )
    assert "Acceptance is ngram_k4's limit: its best tau is 1.05" in " ".join(_findings(low_tau))


def test_findings_name_the_chain_break_the_load_trend_and_the_cost(summary: Summary) -> None:
    text = " ".join(_findings(summary))
    rates = [c.per_position_acceptance for c in summary.cells_of("ngram_k4")]
    assert all(len(r) == 4 for r in rates)
    assert "ngram_k4 accepts its draft token at position 1 in 87% of steps and at position 4 in 33%" in text
    # one start-up per arm: the findings say the numbers are unverified, never state them as facts
    assert (
        "With load, ngram_k4 on code_humaneval goes from 0.98x (unverified) at concurrency 1 to 0.95x "
        "(unverified) at 2" in text
    )
    assert "$/Mtok: code_humaneval @1 stays at the baseline's 3.36 (no arm shown to pay)" in text
    paying = with_cells(
        summary,
        **{
            "ngram_k4/code_humaneval/1": {
                "speedup": 1.6,
                "estimate": {"low": 1.4, "high": 1.8},
                "usd_per_mtok": 2.1,
            }
        },
    )
    assert "code_humaneval @1 3.36 -> 2.10 with ngram_k4 (-38%)" in " ".join(_findings(paying))
    broken = with_cells(
        summary,
        **{
            f"ngram_k4/{w}/{c}": {"per_position_acceptance": [0.2, 0.1, 0.05, 0.0]}
            for w in ("code_humaneval", "chat_mtbench")
            for c in (1, 2)
        },
    )
    assert "the chain breaks most often at position 1 (80 points lost there)" in " ".join(_findings(broken))


# ---- the lab table and the terminal ------------------------------------------------------------


def test_lab_table_in_markdown(summary: Summary) -> None:
    text = lab_markdown(analyze(summary))
    lines = text.splitlines()
    assert lines[0].startswith("**cpu_e2e run run_v1, concurrency 1**")
    assert lines[2].startswith(
        "| arm | code_humaneval: speedup | code_humaneval: verdict | code_humaneval: tau | "
        "code_humaneval: tok/s"
    )
    assert lines[4] == (
        "| baseline | 1.00x | deploy | 1 | 8.3 | 51.0 | 3.36 | reference | 1.00x | deploy | 1 | 8.4 | 50.7 "
        "| 3.29 | reference |"
    )
    assert lines[5] == (
        "| ngram_k4 | 0.98x | unverified | 2.94 | 8.1 | 54.1 | 3.43 | 2/2 | 1.03x | unverified | 3.64 | "
        "8.7 | 48.7 | 3.20 | 2/2 |"
    )
    assert "concurrency 2" in lab_markdown(analyze(summary), 2)
    with pytest.raises(UserError, match="concurrency 8 was not measured in this run"):
        lab_markdown(analyze(summary), 8)


def test_answer_lines_end_with_the_verdict(summary: Summary) -> None:
    lines = answer_lines(analyze(summary))
    at = lines.index("Verdict:")
    findings = next(i for i, line in enumerate(lines) if line.startswith("Findings: ngram_k4 accepts"))
    assert findings < at  # the detail above, the answer last: where the eye lands when a run ends
    assert all(line.startswith("  ") for line in lines[at + 1 :])  # nothing but the verdict's block after it
    assert (
        lines[at + 1]
        .replace("\n    ", " ")
        .startswith(
            "  code_humaneval @1: unverified: ngram_k4 0.98x (slower) on 2 code prompts at concurrency 1"
        )
    )
    intervals = next(line for line in lines if line.startswith("  intervals: "))
    assert intervals.replace("\n    ", " ") == (
        "  intervals: unverified: 1 start-up per arm, no calibration (set load.server_starts >= 2, or bench "
        "calibrate)"
    )


def test_backend_line_once_when_every_arm_agrees(summary: Summary) -> None:
    from harness.config.engines.served import AttentionBackend
    from harness.present.table import backend_line

    assert backend_line(summary) is None  # the v1 fixture predates the record
    cpu = AttentionBackend(target="CPU_ATTN", source="inferred")
    same = summary.model_copy(
        update={"arms": [a.model_copy(update={"attention_backend": cpu}) for a in summary.arms]}
    )
    assert backend_line(same) == "Attention backend: CPU_ATTN for every arm (inferred)."
    flash = AttentionBackend(target="FLASH_ATTN", drafter="FLEX_ATTENTION", source="server log")
    mixed = same.model_copy(
        update={"arms": [same.arms[0], same.arms[1].model_copy(update={"attention_backend": flash})]}
    )
    assert backend_line(mixed) == (
        "Attention backend: baseline CPU_ATTN, ngram_k4 FLASH_ATTN (drafter FLEX_ATTENTION) "
        "(inferred; server log)."
    )


def test_timing_and_cpu_lines(summary: Summary) -> None:
    from harness.present.table import cpu_line, timing_line
    from harness.results import Invocation, RunTiming

    assert timing_line(summary) is None and cpu_line(summary) is None  # not recorded in version 1
    first = Invocation(wall_s=300, prepare_s=5, startup_s=120, measured_s=150, warmup_s=10, interrupted=True)
    second = Invocation(wall_s=90, prepare_s=5, startup_s=30, measured_s=50, warmup_s=4)
    timed = summary.model_copy(update={"timing": RunTiming(invocations=[first, second])})
    assert timed.timing.overhead_ratio == pytest.approx(390 / 350)
    assert " ".join(timing_line(timed).split()) == (  # wrapped to the terminal
        "Run time over 2 invocations: 6.5 min = 2.5 min of server start-ups + 3.3 min measuring + "
        "0.7 min else (preparation 10 s, warm-up 14 s, scrapes and shutdowns): 1.11x start-ups + measuring."
    )
    cpu = {"engine_cpu_cores": 1.9, "client_cpu_cores": 0.03, "others_cpu_cores": 0.6, "steal_share": 0.0}
    busy = with_cells(summary, **{"ngram_k4/code_humaneval/1": {**cpu, "noisy_neighbour": True}})
    line = cpu_line(busy)
    assert line.startswith(
        "CPU during the windows, in cores (the most of any cell): engine 1.90, harness client 0.03"
    )
    assert line.endswith("Flagged (busy neighbour or busy client): ngram_k4 code_humaneval @1.")
    verdict = window_verdicts(busy)[0]
    assert verdict.provisional and provisional_text(verdict) == (
        "measured beside a busy neighbour: ngram_k4: other processes 0.60 cores, hypervisor steal 0%"
    )
    assert verdict_line(verdict).startswith("PROVISIONAL (measured beside a busy neighbour: ngram_k4: other")


def test_a_finding_says_what_the_window_decided_of_its_fastest_arm(summary: Summary) -> None:
    """The fastest arm's own interval clears 1, but not once corrected for the pick: the finding
    states its number as undecided, as the verdict does."""
    two_arms = with_cells(
        summary,
        **{
            "ngram_k4/code_humaneval/1": {
                "speedup": 1.3,
                "estimate": {
                    "low": 1.01,
                    "high": 1.67,
                    "source": "server_starts",
                    "df": 2,
                    "log_se": 0.06,
                    "rounds": 2,
                },
            }
        },
    )
    from dataclasses import replace

    verdicts = window_verdicts(two_arms)
    picked = replace(verdicts[0], candidates=2)  # the fastest of 2 arms: corrected for the pick
    assert verdicts[0].outcome == "pays" and picked.outcome == "indistinguishable"
    text = " ".join(findings_text(findings(two_arms, [picked, *verdicts[1:]])))
    assert "ngram_k4 on code_humaneval goes from 1.30x (too noisy to tell) at concurrency 1" in text
