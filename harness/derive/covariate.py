"""The covariate that removes most of the prompts' sampling spread from a speedup (derive layer: pure).

A speedup's interval is about the workload, not only the prompts a run sent: a delete-one-prompt
jackknife adds the prompts' sampling (``harness.derive.intervals.prompt_variance``). At one request
in flight that term dominates: prompts differ in how much a drafter can guess of their answers. Much
of that is known before any arm speculates: the **copy share** of the baseline's greedy output, the
share of its 3-grams already found in the prompt or earlier in the output (the cells'
``context_share_pct``, one answer at a time) - what prompt lookup copies, and what a drafter finds
easy. The baseline's greedy output is the same under every arm, so the share is pre-treatment: a
regression (control-variate) estimator on it corrects the sample's luck in prompts to the
workload's mean share, and leaves in the interval only the part of the prompts' spread the share
does not explain (1 - R^2).

The workload's mean share comes from the workload pass: the baseline's greedy answers to every
prompt of the workload on its first start-up (``arms/<baseline>/workload_pass.jsonl``; kept per
model, workload and machine for later runs). Each sampled prompt's share is read from the same pass,
so the sample and the mean are one definition; the run's own baseline answers are checked against it
(a pass that disagrees with them on more than ``MOST_DISAGREEING`` of the prompts was made under other
conditions, or edited: not used, and said).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from harness.core.probes.copying import copied_ngrams
from harness.results.model import CovariateUse
from harness.results.records import RequestRecord

NAME = "copy share"
# a pass whose answers differ from the run's own baseline answers on more than this share of the run's
# prompts is not this run's workload (another engine state, other numerics, an edited file)
MOST_DISAGREEING = 0.1
# fewer prompts than this leave the regression's slope too loose to help (it costs a degree of freedom)
FEWEST_PROMPTS = 6


def copy_share(prompt_token_ids: Sequence[int], token_ids: Sequence[int]) -> float | None:
    """The share of the output's 3-grams found in the prompt or earlier in the output (the
    ``context_share_pct`` formula, ``harness.core.probes.copying``, for one answer); None without
    the prompt's token ids or an output of 3 tokens."""
    counts = copied_ngrams(prompt_token_ids, token_ids)
    return counts.from_context / counts.total if counts.total else None


@dataclass(frozen=True)
class Covariates:
    """One workload's covariate: each prompt's copy share (the workload pass's answers) and the
    workload's mean over every prompt of it."""

    values: Mapping[str, float]  # prompt id -> its copy share
    mean: float
    pool: int  # the prompts the mean is over


@dataclass(frozen=True)
class CovariateState:
    """Per workload, its covariate, or why there is none (said with the interval)."""

    by_workload: Mapping[str, Covariates]
    missing: Mapping[str, str]  # workload -> why it has no covariate

    def uses(self) -> list[CovariateUse]:
        """As the summary stores it, one per workload."""
        found = [CovariateUse(workload=w, mean=c.mean, pool=c.pool) for w, c in self.by_workload.items()]
        return found + [CovariateUse(workload=w, missing=why) for w, why in self.missing.items()]


def _shares(records: Sequence[RequestRecord]) -> dict[str, float] | None:
    """Per prompt id, its answer's copy share; None where a prompt has no finished answer with tokens."""
    found: dict[str, float] = {}
    for record in records:
        if record.failure is not None:
            continue
        share = copy_share(record.prompt_token_ids, record.token_ids)
        if share is not None:
            found.setdefault(record.prompt_id, share)
    return found


def covariates(
    workload_pass: Sequence[RequestRecord],
    baseline: Sequence[RequestRecord],
    workloads: Sequence[str],
    pool_sizes: Mapping[str, int] | None = None,
    why_none: str | None = None,
) -> CovariateState:
    """Each workload's covariate from the workload pass (``workload_pass``: its records), checked
    against the run's own baseline answers at the pass's concurrency (``baseline``: its measured
    requests). ``pool_sizes``: the prompts each workload has (a pass missing any is incomplete);
    ``why_none``: the run side's reason it made no pass."""
    found: dict[str, Covariates] = {}
    missing: dict[str, str] = {}
    for workload in workloads:
        records = [r for r in workload_pass if r.workload == workload]
        if not records:
            missing[workload] = why_none or "no workload pass"
            continue
        shares = _shares(records) or {}
        asked = {r.prompt_id for r in records}
        pool = (pool_sizes or {}).get(workload, len(asked))
        if len(shares) < max(pool, len(asked)):
            missing[workload] = (
                f"the workload pass answered {len(shares)} of {max(pool, len(asked))} prompts with tokens"
            )
            continue
        concurrency = min(r.concurrency for r in records)
        own = {
            r.prompt_id: r.token_ids
            for r in baseline
            if r.workload == workload and r.concurrency == concurrency and r.failure is None
        }
        answers = {r.prompt_id: r.token_ids for r in records if r.failure is None}
        compared = [p for p in own if p in answers]
        differing = sum(own[p] != answers[p] for p in compared)
        if not compared:
            missing[workload] = "the run's baseline answered none of the workload pass's prompts"
            continue
        if differing > MOST_DISAGREEING * len(compared):
            missing[workload] = (
                f"the workload pass's answers differ from this run's baseline on {differing} of "
                f"{len(compared)} prompts: made under other conditions"
            )
            continue
        found[workload] = Covariates(shares, sum(shares.values()) / len(shares), len(shares))
    return CovariateState(found, missing)
