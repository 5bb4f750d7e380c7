"""The verdict in words (present layer: renders a ``RunAnalysis``, computes nothing).

Each window's answer comes first in plain words a reviewer reads without a glossary ("pays",
"loses", "no difference", "too noisy to tell", "unverified"), with its number, its 95% range and
its scope; the model's details (degrees of freedom, the correction for picking the fastest arm,
the looks of a deciding run) go on one line beneath it.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.config.engines.names import LABELS
from harness.core.formats import bound_text, interval_text, range_text, speedup_text
from harness.derive.analysis import IntervalBasis, RunAnalysis
from harness.derive.findings import Fact
from harness.derive.intervals import EQUIVALENCE_MARGIN, FEW_DF, Estimate
from harness.derive.rounds import CONTINUED_FALSE_PAYS, FALSE_PAYS  # constants: the continuation's bound
from harness.derive.summary import MAX_FAILED_SHARE
from harness.derive.verdict import (
    Caveat,
    Divergence,
    Neighbour,
    Outcome,
    PublishedCheck,
    SloCapacity,
    WindowVerdict,
)
from harness.results.model import CellMetrics, Summary

OUTCOME_WORDS = {
    Outcome.PAYS: "pays",
    Outcome.LOSES: "loses",
    Outcome.EQUIVALENT: "no difference",
    Outcome.INDISTINGUISHABLE: "too noisy to tell",
    Outcome.UNVERIFIED: "unverified",
    Outcome.NO_ARM: "no speculative arm measured",
}


# every caveat's words, by its code (harness.derive.verdict.Caveat): its arm and values fill them in
CAVEAT_TEXT: dict[str, str] = {
    "drafter_mechanics": "{arm}: {label}",
    "drafter_trained_on_measured": (
        "{arm}: drafter trained on {prompts} of the measured prompts (tau flattered)"
    ),
    "client_busy": "{arm}: the harness's client used {cores:.2f} cores, its numbers may be the client's",
    "behind_schedule": (
        "{arm}: the client fell behind its arrival schedule (p90 lag {lag_ms:.0f} ms; sent {sent_rps:.2f} of "
        "{rate:g} req/s): the load arrived lighter than stated"
    ),
    "effective_load": (
        "effective load differs: {baseline} averaged {baseline_in_flight:.2f} requests in flight, {arm} "
        "{arm_in_flight:.2f} (stated {stated}): the window drains, use num_prompts >= {prompts}"
    ),
    "regime_mismatch": "regime mismatch (run with --allow-mismatch): {detail}",
    "lossy": "lossy acceptance allowed: {detail}",
    "known_defect": "known engine defect, forced (--allow-known-defect): {detail}",
    "engine_patched": "engine patched: {detail}",
    "arm_mismatch": "arm {arm}: regime mismatch: {detail}",
    "arm_not_ok": "arm {arm} is {status}: not in any verdict{why}",
    "arm_failed_late": (
        "arm {arm} failed on start-up {failed}{why}: the start-ups it completed before it are in its "
        "verdicts, its later ones were not run"
    ),
    "fewer_rounds": (
        "{arm}: {rounds} of the baseline's {baseline_rounds} rounds (it failed on start-up {failed}): its "
        "interval rests on the rounds both completed"
    ),
    "unpaired": (
        "arm {arm}: its start-ups ran in other rounds than the baseline's (retried on resume), so they are "
        "not paired by round: its speedup has no interval (drift between those rounds would be in it); a new "
        "run measures it with the baseline"
    ),
    "failed_requests": (
        "arm {arm}: {failed} of {total} requests failed ({where}); its figures count only the completed "
        f"ones, and no window where more than {MAX_FAILED_SHARE:.0%} of the requests failed (the errors "
        "are in its samples.jsonl)"
    ),
    "mechanics_only": (
        "mechanics only: {arms} draft with untrained weights or the target itself; their speed is what the "
        "method costs here, their tau says nothing about the method"
    ),
    "self_draft_greedy": (
        "{arm} drafts greedily (draft_sample_method greedy): at temperature > 0 each drafted token is "
        "accepted with the target's probability of its argmax, not 1, so its tau stays below K + 1 = {top} "
        "on a correct engine; probabilistic drafting approaches it"
    ),
    "self_draft_sampled": (
        "{arm} samples its drafts from the target itself (draft_sample_method {sampling}): an exact "
        "rejection sampler accepts them all, tau near K + 1 = {top}; well below it, suspect the engine"
    ),
    "compiled_divergence": (
        "compiled: outputs identical to the baseline's on fewer prompts than the baseline's own {source} "
        "({floor:.0f}%): {arms}; with the engine compiled (engine.enforce_eager: false) the noise floor "
        "cannot tell a divergence of the compiled verify pass from one of speculation: a run with "
        "engine.enforce_eager: true tells them apart"
    ),
    "noise_floor": (
        "noise floor: the baseline reproduced itself on {pct:.0f}% of {compared} prompts: an arm's "
        "divergences up to that share are numerics, not speculation"
    ),
    "endpoint_scope": (
        "existing servers: every arm is a server the harness did not start, so each round is one window "
        "of each arm on the servers as they ran, not a fresh start-up; the intervals are about these "
        "deployments over this run's time, and cannot see a restart's spread, the servers' machines "
        "(hardware, target and engine are declared, not checked) or their prefix caches (not emptied)"
    ),
    "endpoint_shared": (
        "{arm}: its server generated {tokens:,.0f} output tokens for other clients during its windows: "
        "its timings and tau include another tenant's load"
    ),
    "endpoint_alone_unknown": (
        "{arms}: whether each window was alone on its server is unknown (its metrics report no generated-"
        "token counter, or the window's own output tokens were not all counted: text streamed without "
        "token ids and no usage)"
    ),
    "endpoint_same_server": (
        "{arm}: one server with {arms} (allow_shared_endpoints): their comparison is that server against "
        "itself, and any difference between them is the windows' noise or their order"
    ),
    "uncaptured": (
        "{arm}: {cells}: more tokens a step than the {ceiling} the engine captured as CUDA graphs, so "
        "those steps ran uncaptured: the cells measure the fallback, not the method; raise the ceiling "
        "(vLLM: --compilation-config '{{\"max_cudagraph_capture_size\": {needed}}}')"
    ),
    "running_cap": (
        "{arm}: the engine runs at most {cap} requests at once ({source}), so at {levels} the rest "
        "queued while the baseline's did not; set the cap above the concurrency (SGLang: "
        "--max-running-requests, vLLM: --max-num-seqs)"
    ),
    "async_speculation": (
        "{arm}: async scheduling was on with this method at {levels} on vLLM {release}, where vLLM "
        "#46669 (open) reports garbage outputs above concurrency 1: read its exactness first "
        "(--no-async-scheduling avoids it)"
    ),
    # {features}: the reference CPU's features this one lacks (slower) or has beyond it (faster)
    "slower_machine": (
        "this machine ran {times:.1f}x slower than the reference{features_said}: the baseline made "
        "{tok_s:.1f} tok/s on {window} against {reference_tok_s:.1f} in run {reference_run} ({source}) on "
        "{reference_machine}; this run's minutes and $/Mtok are this machine's"
    ),
    "faster_machine": (
        "this machine ran {times:.1f}x faster than the reference{features_said}: the baseline made "
        "{tok_s:.1f} tok/s on {window} against {reference_tok_s:.1f} in run {reference_run} ({source}) on "
        "{reference_machine}; this run's minutes and $/Mtok are this machine's"
    ),
    "metrics_other_models": (
        "{arm}: its server's /metrics also count the model(s) {models} (label model_name): left out, "
        "only the served model's counters are read"
    ),
    "cache_reset_failed": (
        "{arm}: the engine refused to empty its prefix cache before {windows} of its windows, every time "
        "it was asked: those windows may have run on the previous window's cached prompts (faster "
        "prefills than a cold start)"
    ),
    # {regime}: published_regime_text, the source's recorded regime beside the arm's
    "published_outside": (
        "{arm} {where}: its {quantity}'s 95% interval [{low:.2f}, {high:.2f}] lies entirely {side} the "
        "published {published_low:g}-{published_high:g} ({source}){regime}"
    ),
}


def _temperature_words(temperature: float) -> str:
    return "greedy" if temperature == 0 else f"at temperature {temperature:g}"


def _source_regime(values: dict) -> str:
    """The source's recorded regime: ``at temperature 1, SGLang tree, K=7``."""
    engine = values.get("source_engine")
    drafting = " ".join(
        str(part)
        for part in (LABELS.get(str(engine), engine), values.get("source_shape"))
        if part is not None
    )
    k, runner, method = (
        values.get(f"source_{name}") for name in ("num_speculative_tokens", "model_runner", "method")
    )
    parts = [
        _temperature_words(values["source_temperature"]) if "source_temperature" in values else None,
        drafting or None,
        f"method {method}" if method is not None else None,
        f"K={k}" if k is not None else None,
        f"Model Runner {str(runner).upper()}" if runner is not None else None,
    ]
    return ", ".join(part for part in parts if part)


def _differences(values: dict) -> list[str]:
    """What the summary can tell differs between the source's recorded regime and the arm's."""
    found = []
    sampling, temperature = values.get("arm_sampling"), values.get("source_temperature")
    if sampling is not None and temperature is not None and (temperature == 0) != (sampling == "greedy"):
        found.append("temperature")
    k, arm_k = values.get("source_num_speculative_tokens"), values.get("arm_k")
    if k is not None and arm_k is not None and k != arm_k:
        found.append("K")
    if values.get("another_regime"):
        found += [name for name in ("shape", "method") if f"source_{name}" in values]
    return list(dict.fromkeys(found))


def published_regime_text(values: dict) -> str:
    """The end of a ``published_outside`` caveat: where the figure records the regime it was
    measured in, that regime beside the arm's and what differs (``; published at temperature 1,
    SGLang tree; measured greedy, K=7: ...``), so a gap between regimes reads as that difference,
    not as a fault; without one, the general words."""
    published = _source_regime(values)
    if not published:
        return (
            ": this run is not the publication's regime (hardware, engine, K, prompts, counting), or "
            "something is wrong"
        )
    shape = values.get("source_shape") if not values.get("another_regime") else None
    arm_k = values.get("arm_k")
    measured = ", ".join(
        str(part) for part in (values.get("arm_sampling"), shape, f"K={arm_k}" if arm_k else None) if part
    )
    text = f"; published {published}" + (f"; measured {measured}" if measured else "")
    differs = _differences(values)
    if values.get("another_regime") or differs:
        what = f" in {', '.join(differs)}" if differs else ""
        reference = " (a reference from another regime)" if values.get("another_regime") else ""
        return (
            f"{text}{reference}: the regimes differ{what}, so the gap is that difference, not by "
            "itself a fault"
        )
    return (
        f"{text}: the conditions the figure records are this arm's, so this run differs from the "
        "publication in what they leave out (hardware, engine release, prompts, counting), or something "
        "is wrong"
    )


def caveat_text(found: Caveat) -> str:
    # "why": a value analyses stored before it was recorded do not hold
    values = {"why": "", **dict(found.values)}
    if found.code == "published_outside":
        values["regime"] = published_regime_text(values)
    if found.code in ("slower_machine", "faster_machine"):
        side = "absent" if found.code == "slower_machine" else "present"
        values["features_said"] = f" ({values['features']} {side} here)" if values.get("features") else ""
    return CAVEAT_TEXT[found.code].format(arm=found.arm, **values)


def neighbour_text(found: Neighbour) -> str:
    """What else ran during a cell's windows: on the CPU and, where watched, on its GPUs."""
    parts = []
    if found.others_cpu_cores is not None:
        steal = 100 * (found.steal_share or 0)
        parts.append(f"other processes {found.others_cpu_cores:.2f} cores, hypervisor steal {steal:.0f}%")
    if found.gpu_other_processes:
        sm = "" if found.gpu_others_sm_pct is None else f" using {found.gpu_others_sm_pct:.0f}% of the SMs"
        parts.append(f"{found.gpu_other_processes} other process(es) on its GPUs{sm}")
    return "; ".join(parts)


def provisional_text(v: WindowVerdict) -> str:
    """Why a window's verdict is provisional (empty when it is not)."""
    if not v.neighbours:
        return ""
    return "measured beside a busy neighbour: " + "; ".join(
        f"{n.arm}: {neighbour_text(n)}" for n in v.neighbours
    )


def _own(estimate: Estimate) -> str:
    """The arm's own 95% range, as every table shows its interval."""
    if estimate.low is None or estimate.high is None:
        return "no interval"
    return f"95%: {range_text(estimate.low, estimate.high)}"


def scope_text(v: WindowVerdict) -> str:
    """What the verdict is about: the workload its prompts were sampled from, where the interval
    holds their sampling; else these prompts (one start-up, or a summary before version 13)."""
    if v.estimate is not None and v.estimate.prompts:
        return f"on {v.workload} ({v.prompts} prompts sampled)"
    return f"on {v.prompts} {v.baseline.category} prompts"


def _said(v: WindowVerdict) -> str:
    """The outcome, the arm, its number and range, and the window's scope, in plain words."""
    e, d, arm = v.estimate, v.decision, v.best.arm  # type: ignore[union-attr]
    assert e is not None and d is not None
    scope = f"{scope_text(v)} at {v.level.label()}"
    outcome = v.outcome
    if outcome == Outcome.PAYS and v.lossy is not None:
        return (
            f"{arm} pays, but is {lossy_text(v.lossy)}: {bound_text(e.point)}x faster ({_own(e)}) {scope}; "
            f"not deployed: deploy {v.deploy}{_rivals(v)}"
        )
    if outcome == Outcome.PAYS:
        return f"{arm} pays: {bound_text(e.point)}x faster ({_own(e)}) {scope}{_rivals(v)}"
    if outcome == Outcome.LOSES:
        return (
            f"{arm} loses: {bound_text(e.point)}x, slower than the baseline ({_own(e)}) {scope}"
            f"{_not_lossless(v)}{_rivals(v)}"
        )
    if outcome == Outcome.EQUIVALENT:
        margin = f"{100 * EQUIVALENCE_MARGIN:.0f}%"
        point = speedup_text(e.point)
        return f"no difference: {arm} within {margin} of the baseline, {point} ({_own(e)}) {scope}"
    if outcome == Outcome.INDISTINGUISHABLE:
        low, high = d.low, d.high
        assert low is not None and high is not None
        picked = f" held over the {v.candidates} arms at once" if v.corrected else ""
        if v.provisional:
            hint = "re-run on a quiet machine"
        elif e.out_of_rounds:
            hint = (
                f"all {e.rounds} rounds its design allowed were used: raise load.server_starts.max, or "
                "bench calibrate"
            )
        elif v.to_decide is not None:
            hint = (
                f"continuing to {v.to_decide} rounds in all may decide it (bench run --resume RUN_DIR "
                f'--rounds {v.to_decide}; false "pays" over the whole run then at most '
                f"{100 * CONTINUED_FALSE_PAYS:.0f}% instead of {100 * FALSE_PAYS:.1f}%)"
            )
        else:  # not even if more start-ups moved its point by their own chance (verdict._to_decide)
            hint = "more rounds alone would not decide it: more prompts (load.num_prompts) in a new run"
        return (
            f"too noisy to tell: {arm} {speedup_text(e.point)} ({_own(e)}), anywhere from "
            f"{bound_text(low)}x to {bound_text(high)}x{picked} {scope}; {hint}"
        )
    side = "faster" if round(e.point, 2) > 1.0 else "slower" if round(e.point, 2) < 1.0 else "about the same"
    why = "one start-up per arm: its spread was not measured" if e.rounds <= 1 else "no interval"
    return f"unverified: {arm} {speedup_text(e.point)} ({side}) {scope}; {why}"


def outcome_words(v: WindowVerdict) -> str:
    """A window's outcome in a word or two: "pays, not lossless" where the chosen arm pays but is
    not lossless here (not deployed), else the outcome's own words."""
    return "pays, not lossless" if v.outcome == Outcome.PAYS and v.lossy else OUTCOME_WORDS[v.outcome]


def lossy_text(d: Divergence) -> str:
    """Why an arm is not lossless here, in numbers."""
    if d.shifted is not None:
        return f"not lossless here: its output distribution {d.shifted}"
    floor = f"{d.floor} of {d.floor_compared}" if d.floor_compared else "none compared"
    return (
        f"not lossless here: {d.diverged} of {d.compared} prompt outputs diverged beyond a near tie "
        f"(the baseline's own: {floor})"
    )


def _not_lossless(v: WindowVerdict) -> str:
    """The chosen arm's divergence where its outcome is not "pays" (a paying one says it first)."""
    if v.lossy is None or v.outcome == Outcome.PAYS:
        return ""
    return f"; {v.lossy.arm} is {lossy_text(v.lossy)}"


def _rivals(v: WindowVerdict) -> str:
    """The arms beside the choice: not lossless here (never deployed, whatever their speed); beside a
    paying choice, faster but undecided, or paying too and not told apart."""
    chosen = v.best.arm if v.best else None
    said = [
        f"{d.arm} ({speedup_text(_point(v, d.arm))}) is {lossy_text(d)}: not deployed"
        for d in v.not_lossless
        if d.arm != chosen
    ]
    said += [
        f"{r.arm} may be faster ({speedup_text(r.estimate.point)}) but is too noisy to tell"
        for r in v.faster_undecided
    ]
    said += [
        f"{r.arm} pays too ({speedup_text(r.estimate.point)}): which is faster is not decided"
        for r in v.tied
        if r.arm not in {d.arm for d in v.not_lossless}
    ]
    return "".join(f"; {s}" for s in said)


def _point(v: WindowVerdict, arm: str) -> float:
    return next((r.estimate.point for r in v.rivals if r.arm == arm), 1.0)


def _cost(v: WindowVerdict) -> str:
    """$/Mtok at the baseline and at the arm; a change only where the verdict decided one."""
    before = v.baseline.usd_per_mtok
    after = v.best.usd_per_mtok if v.best else None
    if before is None or after is None:
        return "not priced"
    if v.outcome in (Outcome.PAYS, Outcome.LOSES) and v.saving_pct is not None:
        return f"$/Mtok {before:.2f} -> {after:.2f} ({-v.saving_pct:+.0f}%)"
    return f"$/Mtok {before:.2f} at the baseline (no change shown)"


def identical_counts(cell: CellMetrics) -> tuple[int, int, int] | None:
    """(identical, near ties, compared) prompts of a cell against the baseline; None: not compared."""
    shares = cell.exactness
    if shares is None or not shares.compared:
        return None

    def count(pct: float | None) -> int:
        return round(shares.compared * (pct or 0.0) / 100)

    return count(shares.identical_pct), count(shares.near_tie_pct), shares.compared


def identical_text(cell: CellMetrics) -> str:
    counts = identical_counts(cell)
    if counts is None:
        return "outputs not compared"
    same, near, compared = counts
    ties = f" ({near} near tie{'s' if near > 1 else ''})" if near else ""
    return f"outputs identical {same}/{compared}{ties}"


def outputs_text(v: WindowVerdict) -> str:
    if v.best is None:
        return "–"
    return f"output distribution {v.distribution}" if v.distribution else identical_text(v.best)


def verdict_line(v: WindowVerdict) -> str:
    """The window's answer in one line: plain words first, then $/Mtok and exactness, then caveats."""
    where = f"{v.workload} {v.level.short()}"
    if v.best is None or v.estimate is None:
        tok_s = "-" if v.baseline.output_tok_s is None else f"{v.baseline.output_tok_s:.1f}"
        if v.alone is not None:
            spread = f"{v.alone.point:.1f} tok/s [{v.alone.low:.1f}, {v.alone.high:.1f}]"
            return f"{where}: one server, compared with nothing: {spread} (95% over its rounds)"
        return f"{where}: no speculative arm measured; baseline {tok_s} tok/s"
    head = f"{where}: {_said(v)}"
    if v.best is not None and v.outcome not in (Outcome.PAYS, Outcome.LOSES):
        head += _not_lossless(v) + _rivals(v)  # what is not lossless, whatever the outcome
    if v.provisional:
        head = f"PROVISIONAL ({provisional_text(v)}): {head}"
    line = "; ".join([head, _cost(v), outputs_text(v)])
    return line + (f" [{'; '.join(caveat_text(c) for c in v.caveats)}]" if v.caveats else "")


def statistics_line(v: WindowVerdict) -> str | None:
    """The model's details of one window's verdict, on the line beneath it."""
    e, d = v.estimate, v.decision
    if e is None or e.low is None or e.high is None:
        return None
    parts = [f"{e.rounds} rounds" if e.rounds > 1 else "1 start-up per arm and a calibration"]
    if e.prompts and e.prompt_log_se is not None:
        spread = e.prompt_half_pct
        covariate = ""
        if e.covariate_r2 is not None:
            covariate = (
                f"; copy share R^2 {e.covariate_r2:.2f}, moved {e.covariate_moved_pct:+.1f}% to the "
                "workload's mean"
            )
        parts.append(
            f"{e.prompts} prompts as a sample of the workload (their sampling alone +-{spread:.0f}%"
            f"{covariate})"
        )
    if e.own_spread:
        parts.append("its own start-up spread (it varies more than the other arms: F test)")
    if e.calibration_refused:
        parts.append("the calibration not pooled (this run varies more than it: F test)")
    degrees = "degree" if e.df == 1 else "degrees"
    parts.append(f"{e.df} {degrees} of freedom" + (" (few: relies on normality)" if e.df < FEW_DF else ""))
    if e.looks > 1:
        parts.append(f"corrected for {e.looks} looks ({100 * e.level():.1f}% each)")
    if v.candidates > 1:
        if d is not None and d.low is not None and d.high is not None:
            parts.append(
                f"held over the {v.candidates} arms at once {interval_text(d.low, d.high)} "
                f"({100 * e.level(v.candidates):.1f}%)"
            )
        else:
            parts.append(f"held over the {v.candidates} arms at once: no interval")
    return f"{speedup_text(e.point, e.low, e.high)}: " + "; ".join(parts)


def design_line(v: WindowVerdict, precision_pct: float) -> str | None:
    """What would pin the window's interval to the stated precision (``verdict.precision_pct``)."""
    d = v.design
    if d is None:
        return None
    if not d.reachable:
        return (
            f"+-{d.half_pct:.0f}% now; +-{precision_pct:g}% is out of reach within 12 rounds at this "
            "start-up spread: a quieter machine, or bench calibrate"
        )
    rounds = "" if d.rounds <= (v.estimate.rounds if v.estimate else 1) else f" and {d.rounds} rounds"
    return (
        f"+-{d.half_pct:.0f}% now; about {d.prompts} prompts per window{rounds} would pin it to "
        f"+-{precision_pct:g}% (verdict.precision_pct)"
    )


def chance_line(basis: IntervalBasis) -> str | None:
    """The run's windows together: the false "pays" chance alone could give among them."""
    if basis.windows <= 1 or basis.chance_pays <= 0:
        return None
    if basis.familywise:
        return (
            f"{basis.windows} windows, held at 95% together (verdict.familywise): at most "
            f"{basis.chance_pays:.3f} false 'pays' expected among them if nothing paid"
        )
    return (
        f"{basis.windows} windows, each at 95% alone: up to {basis.chance_pays:.2f} false 'pays' expected "
        "among them if nothing paid (verdict.familywise: true holds 95% over all of them)"
    )


def basis_line(basis: IntervalBasis) -> str:
    """Where every verdict's interval comes from, in one line."""
    if basis.alone:
        return (
            "one server, nothing to compare it with: no speedup and no verdict; each window's tok/s with "
            "its 95% interval over the rounds (the tables pool them)"
        )
    if not basis.sources and basis.rounds > 1:
        return (
            f"no interval from {basis.rounds} rounds: no speculative arm's start-ups were paired with "
            "the baseline's by round (see the caveats)"
        )
    if not basis.sources:
        return (
            "unverified: 1 start-up per arm, no calibration (set load.server_starts >= 2, or bench calibrate)"
        )
    dfs = basis.dfs
    df_text = f"{dfs[0]}" if len(dfs) == 1 else f"{dfs[0]}-{dfs[-1]}" if dfs else "-"
    where = f"{basis.rounds} rounds of server start-ups" if basis.rounds > 1 else "1 start-up per arm"
    calibration = f" and {basis.calibration}" if basis.calibration else ""
    sequential = (
        f"; rounds added until decided: each interval at {100 * basis.look_level:.1f}% for the "
        f"{basis.looks} looks it could take"
        if basis.looks > 1
        else ""
    )
    workload = (
        f" and {'/'.join(str(p) for p in basis.prompts)} prompts per window as a sample of the workload"
        if basis.prompts
        else " (about these prompts only)"
    )
    if basis.prompts and basis.covariate_r2 is not None:
        low, high = basis.covariate_r2
        explained = f"{low:.2f}" if f"{low:.2f}" == f"{high:.2f}" else f"{low:.2f}-{high:.2f}"
        workload += (
            f" (their copy share of the baseline's answers explaining R^2 {explained} of their spread, "
            "read at the workload's mean)"
        )
    if basis.prompts and basis.no_covariate:
        workload += f" (no covariate: {'; '.join(basis.no_covariate)})"
    own = f"; on their own spread: {', '.join(basis.own_spread)}" if basis.own_spread else ""
    prior = (
        f" with a half-normal prior (scale {100 * basis.prior_sd:.0f}%) on the start-up spread"
        if basis.prior_sd is not None
        else ""
    )
    return (
        f"95% t intervals from {where}{calibration}{workload}, arms x rounds model{prior}, {df_text} "
        f"degrees of freedom; each arm's decision held over the window's arms at once{sequential}{own}"
    )


def verdict_lines(analysis: RunAnalysis) -> list[str]:
    """The verdict block: each window's line and its statistics beneath, then the basis."""
    lines = ["Verdict:"]
    precision = analysis.basis.precision_pct
    for v in analysis.verdicts:
        lines.append(f"  {verdict_line(v)}")
        details = statistics_line(v)
        if details:
            lines.append(f"      {details}")
        design = design_line(v, precision)
        if design:
            lines.append(f"      {design}")
    lines.append(f"  intervals: {basis_line(analysis.basis)}")
    chance = chance_line(analysis.basis)
    if chance:
        lines.append(f"  windows: {chance}")
    return lines


def continue_lines(analysis: RunAnalysis, run_dir: str) -> list[str]:
    """Per undecided window, the one command that would decide it and about how long it takes."""
    lines = []
    for v in analysis.verdicts:
        if v.to_decide is None or v.estimate is None:
            continue
        minutes = analysis.minutes_to_decide(v)
        took = f"about {_minutes(minutes)} min more" if minutes is not None else "more rounds"
        lines.append(
            f"To decide {v.workload} {v.level.short()}: bench run --resume {run_dir} --rounds {v.to_decide} "
            f'({took}; it may decide it, with false "pays" over the whole run then at most '
            f"{100 * CONTINUED_FALSE_PAYS:.0f}%)"
        )
    return lines


def _minutes(value: float) -> str:
    return f"{value:.1f}" if value < 10 else f"{value:.0f}"


PUBLISHED_WORDS = {
    "inside": "within it",
    "overlaps": "overlaps it",
    "outside": "entirely outside it (a caveat)",
    "no interval": "a point, no interval: not judged",
}


def _figure(quantity: str, value: float) -> str:
    return speedup_text(value) if quantity == "speedup" else f"{value:.2f}"


def published_text(check: PublishedCheck) -> str:
    """One published figure beside what its cell measured: ``eagle3_k3 chat_mtbench @1: speedup
    2.10x [1.95, 2.26] against the published 2.2-2.5x (source): overlaps it``."""
    where = f"{check.arm} {check.workload} {check.level.short()}"
    unit = "x" if check.quantity == "speedup" else ""
    published = f"the published {check.low:g}-{check.high:g}{unit} ({check.source})"
    if check.measured is None:
        return f"{where}: {check.quantity} not measured; {published}"
    measured = _figure(check.quantity, check.measured)
    if check.measured_low is not None and check.measured_high is not None:
        measured += f" {interval_text(check.measured_low, check.measured_high)}"
    return f"{where}: {check.quantity} {measured} against {published}: {PUBLISHED_WORDS[check.outcome]}"


def published_lines(analysis: RunAnalysis) -> list[str]:
    """The arms' published figures beside what was measured (none: no lines)."""
    if not analysis.published:
        return []
    head = "Published figures (each arm's own 95% interval against the range published for it):"
    return [head] + [f"  {published_text(c)}" for c in analysis.published]


def capacity_text(c: SloCapacity) -> str:
    """An arm's SLO capacity on a workload, as measured: bounded, or interpolated between two rates."""
    where = f"{c.arm} on {c.workload}"
    if c.kind == "at least":
        return f"{where}: at least {c.rate:g} req/s (every rate measured met it)"
    if c.kind == "below":
        return f"{where}: below {c.rate:g} req/s (the lowest rate measured missed it)"
    low, high = c.between or (c.rate, c.rate)
    return f"{where}: about {c.rate:.2f} req/s (interpolated between {low:g} and {high:g})"


def capacity_lines(analysis: RunAnalysis) -> list[str]:
    found, slo = analysis.capacities, analysis.summary.slo
    if not found or slo is None:
        return []
    head = (
        f"SLO capacity (the highest request rate with {slo.target_pct:g}% of requests within "
        f"{slo.describe()}):"
    )
    return [head] + [f"  {capacity_text(c)}" for c in found]


_STATISTIC_TEXT = {
    "mean_logprob": "mean logprob",
    "output_tokens": "output tokens",
    "top1_share": "top-1 share",
}


def _num(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _delta_text(delta: float | None, low: float | None, high: float | None) -> str:
    interval = "" if low is None or high is None else f" [{low:+.2f}, {high:+.2f}]"
    return f"delta {_num(delta, '+.2f')}{interval}"


def distribution_lines(summary: Summary) -> list[str]:
    """Temperature > 0: each speculative arm's distribution-check verdict with its evidence: per
    statistic the medians, Cliff's delta within prompts with its equivalence interval, the p-value."""
    section = summary.distribution
    if section is None:
        return []
    if section.margin is None:  # a summary from before the equivalence test
        rule = (
            f"two-sided Mann-Whitney at {section.alpha:g} / 3, shifted when also |Cliff's delta| >= "
            f"{section.min_effect:g}"
        )
    else:
        rule = (
            f"compared within each prompt; consistent with lossless when every statistic's Cliff's delta "
            f"has its {section.confidence:.1%} interval inside +-{section.margin:g}, shifted when one "
            f"differs at {section.alpha:g} / 3 with |delta| >= {section.min_effect:g}"
        )
    lines = [
        f"Distribution check ({section.samples_per_prompt} seeded samples per prompt per arm against "
        f"{summary.baseline_arm}'s; {rule}):"
    ]
    for arm, result in section.arms.items():
        tests = "; ".join(
            f"{_STATISTIC_TEXT[t.statistic]} {_num(t.arm_median, '.3g')} vs {_num(t.baseline_median, '.3g')} "
            f"({_delta_text(t.delta, t.low, t.high)}, p {_num(t.p_value, '.2g')})"
            for t in result.tests
        )
        needed = result.samples_per_prompt_needed
        hint = "" if needed is None else f"; i.e. samples_per_prompt: {needed}"
        lines.append(f"  {arm}: {result.verdict}: {tests}{hint}")
    if not section.arms:
        lines.append("  no speculative arm has samples to compare")
    return lines


def _speed(speedup: float, state: str) -> str:
    """A speedup a finding states, with what its window decided of it ("" where decided)."""
    said = {
        "provisional": "provisional: measured beside a busy neighbour",
        "indistinguishable": "too noisy to tell",
    }.get(state, state)
    return speedup_text(speedup) + (f" ({said})" if said else "")


def _rho(value: float | None) -> str:
    return "undefined" if value is None else f"{value:.2f}"


def _step(f: Fact) -> str:
    """The step-cost finding: acceptance or verification as the limit, or what was seen."""
    arm, speed = f.arm, _speed(f["speedup"], f["state"])  # type: ignore[arg-type]
    per_forward = f["per_forward"]
    yields = f" ({per_forward:.2f} tokens per target forward)" if per_forward else ""
    if f["measured"]:  # the cost model's: the engine's own step count
        low, high = f["cost_low"], f["cost_high"]
        bounds = f" {interval_text(low, high)}" if low is not None and high is not None else ""  # type: ignore[arg-type]
        costs = f"{f['cost']:.2f}{bounds} baseline steps, measured"
        if f["needs"] is not None:
            needs_low, needs_high = f["needs_low"], f["needs_high"]
            needs = f"{f['needs']:.2f}"
            if needs_low is not None and needs_high is not None:
                needs += f" {interval_text(needs_low, needs_high)}"  # type: ignore[arg-type]
            costs += f" (its break-even tau there: {needs})"
    else:  # inferred as tokens per step / speedup, where the engine counted no steps
        costs = f"{f['cost']:.1f} baseline decode steps"
    if f.kind == "acceptance_limit":
        return (
            f"Acceptance is {arm}'s limit: its best tau is {f['tau']:.2f} ({f['where']}), so each step pays "
            f"for drafting and verification and yields about one token: {speed}."
        )
    if f.kind == "impossible_step":
        return (
            f"{arm}'s {speed} on {f['where']} is more than its {f['per_step']:.2f} tokens per step allow (a "
            f"speculative step costs at least one target forward, so at most {f['per_step']:.2f}x): the "
            "baseline's windows there ran slower than its engine does, a disturbed measurement, not a cheap "
            "step."
        )
    if f.kind == "verification_limit":
        return (
            f"Verification, not acceptance, is {arm}'s limit in this regime: it emits {f['tau']:.2f} tokens "
            f"per step on {f['where']} yet runs at {speed}, so each of its steps{yields} costs {costs}."
        )
    return (
        f"{arm} turns tau {f['tau']:.2f} into {speed} on {f['where']}: each of its steps{yields} costs "
        f"{costs}."
    )


def _copying(rows: list[Fact], explains: Fact | None) -> str:
    arm, ngram = rows[0].arm, rows[0]["ngram"]
    listed = "; ".join(
        f"{r['workload']}: {r['copy']:.0f}% in the prompt, {r['context']:.0f}% in the prompt or earlier "
        f"output, tau {r['tau']:.2f}"
        for r in rows
    )
    text = (
        f"Share of the output's {ngram}-token n-grams found earlier in the sequence, against {arm}'s tau "
        f"over all load levels: {listed}."
    )
    if explains is None:
        return text
    over = f"over {explains['workloads']} workloads"
    prompt, context = explains["rho_prompt"], explains["rho_context"]
    if explains.kind == "copy_explains_prompt":
        return text + (
            f" Tau rises with the share copied from the prompt (rank correlation {_rho(prompt)} {over}): "  # type: ignore[arg-type]
            "prompt lookup accepts what the output copies."
        )
    if explains.kind == "copy_explains_context":
        return text + (
            f" Tau follows the share found in the prompt or the earlier output (rank correlation "
            f"{_rho(context)} {over}) more than the share copied from the prompt ({_rho(prompt)}): "  # type: ignore[arg-type]
            "the output repeating itself, not the prompt, is much of what the drafter accepts."
        )
    return text + (
        f" Neither share explains tau (rank correlation {_rho(prompt)} with the prompt share, "  # type: ignore[arg-type]
        f"{_rho(context)} with the context share, {over}): acceptance here comes from text that "  # type: ignore[arg-type]
        "neither the prompt nor the earlier output contains verbatim."
    )


def _load(facts: list[Fact]) -> str:
    parts = [
        f"{f.arm} on {f['workload']} goes from {_speed(f['low_speedup'], f['low_state'])} at {f['low']} to "  # type: ignore[arg-type]
        f"{_speed(f['high_speedup'], f['high_state'])} at {f['high']}"  # type: ignore[arg-type]
        for f in facts
    ]
    return "With load, " + "; ".join(parts) + "."


def _cost_sentence(facts: list[Fact]) -> str:
    parts = [
        f"{f['where']} {f['before']:.2f} -> {f['after']:.2f} with {f.arm} (-{f['saving']:.0f}%)"
        if f.kind == "cost_pays"
        else f"{f['where']} stays at the baseline's {f['before']:.2f} (no arm shown to pay)"
        for f in facts
    ]
    return "$/Mtok: " + "; ".join(parts) + "."


def findings_text(facts: Sequence[Fact]) -> list[str]:
    """The findings paragraph's sentences, from the analysis's facts, in their order."""
    sentences: list[str] = []
    copy_rows = [f for f in facts if f.kind == "copy_share"]
    explains = next((f for f in facts if f.kind.startswith("copy_explains")), None)
    if copy_rows:
        sentences.append(_copying(copy_rows, explains))
    for f in facts:
        if f.kind == "category_tau":
            sentences.append(
                f"By category, {f.arm}'s tau ranges from {f['low']:.2f} ({f['low_category']}) to "
                f"{f['high']:.2f} ({f['high_category']})."
            )
        elif f.kind == "chain_holds":
            sentences.append(
                f"{f.arm}'s chain does not break: every draft position is accepted in {f['lowest_pct']:.0f}% "
                "of steps."
            )
        elif f.kind == "chain_breaks":
            sentences.append(
                f"{f.arm} accepts its draft token at position 1 in {f['first_pct']:.0f}% of steps and at "
                f"position {f['last_position']} in {f['last_pct']:.0f}%; the chain breaks most often at "
                f"position {f['worst_position']} ({f['lost']:.0f} points lost there)."
            )
        elif f.kind in ("acceptance_limit", "impossible_step", "verification_limit", "step_cost"):
            sentences.append(_step(f))
        elif f.kind.startswith("k_limit"):
            grew, costlier = f"{f['grew_pct']:+.1f}%", f"{f['costlier_pct']:+.1f}%"
            why = (
                f"its tokens per step barely grew ({grew}) while its step cost grew {costlier}"
                if f.kind == "k_limit_yield"
                else f"its step cost grew faster ({costlier}) than its tokens per step ({grew})"
            )
            sentences.append(
                f"{f.arm} against {f['best']} on {f['where']} ("  # type: ignore[arg-type]
                f"{_speed(f['speedup'], f['state'])} vs {_speed(f['best_speedup'], f['best_state'])}): "  # type: ignore[arg-type]
                f"{why}."
            )
    load = [f for f in facts if f.kind == "load"]
    if load:
        sentences.append(_load(load))
    cost = [f for f in facts if f.kind in ("cost_pays", "cost_stays")]
    if cost:
        sentences.append(_cost_sentence(cost))
    sentences += [
        f"{f['odd']} of {f.arm}'s {f['finished']} finished requests did not stream as decoding "
        f"({f['kinds']}; {f['where']}): their TPOT, in the cells', is a burst's (the export's requests "
        "table marks each: odd)."
        for f in facts
        if f.kind == "odd_requests"
    ]
    return sentences
