"""``bench gate --confirm``: the arms of the failing and inconclusive checks measured again on fresh
start-ups; a check fails only if it fails in both runs (one run's start-ups may have been unlucky),
and one the first run could not decide takes the confirmation's verdict."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from harness.config.regime import Regime
from harness.results.gate import Check


def arms_to_confirm(checks: Sequence[Check], regime: Regime) -> list[str]:
    """The arms a confirmation run measures again, in the regime's order: the baseline arm (the
    speedup and exactness of the others are against it) and every arm with a failing or
    inconclusive check."""
    failing = {c.arm for c in checks if c.verdict in ("fail", "inconclusive")}
    baseline = regime.baseline_arm.name
    return [a.name for a in regime.arms if a.name == baseline or a.name in failing]


def confirmation_regime(regime: Regime, arms: Sequence[str]) -> Regime:
    """The run's regime restricted to ``arms``, with the gates that still name an arm of it: what
    ``bench gate --confirm`` runs on fresh start-ups (the conditions, hence the fingerprint the
    baseline is compared on, are unchanged)."""
    kept = set(arms)
    rules = [g for g in regime.gates.rules if g.arm == "*" or g.arm in kept]
    dumped = regime.model_dump(mode="json")
    dumped["arms"] = [a for a in dumped["arms"] if a["name"] in kept]
    dumped["gates"] = {**dumped["gates"], "rules": [g.model_dump(mode="json") for g in rules]}
    return Regime.model_validate(dumped)


def confirm(first: Sequence[Check], second: Sequence[Check], confirmation_run: str) -> list[Check]:
    """The verdicts after a confirmation run: a check fails only if it fails in both runs (a failure
    the fresh start-ups do not repeat is inconclusive: one run's start-ups may have been unlucky);
    an arm that broke in the confirmation keeps its failure, or is an infrastructure error when
    its engine did not start. A check the first run left inconclusive takes the confirmation's
    verdict: its fresh start-ups decide what the first run's could not (still inconclusive where
    they cannot either). Every other check is the first run's."""
    by_name = {c.name: c for c in second}
    broken = {c.arm: c for c in second if c.gate == "arm"}
    combined = []
    for check in first:
        again = by_name.get(check.name) or broken.get(check.arm)
        where = f"the confirmation run {confirmation_run}"
        if check.verdict == "inconclusive":
            verdict, said = (
                ("inconclusive", "no such check there") if again is None else (again.verdict, again.message)
            )
            message = f"{check.message}; re-measured in {where}: {said}"
            combined.append(replace(check, verdict=verdict, message=message))
            continue
        if check.verdict != "fail":
            combined.append(check)
            continue
        if again is None and check.gate == "arm":  # broke in this run, ran in the confirmation
            failing = [c for c in second if c.arm == check.arm and c.verdict == "fail"]
            verdict, why = (
                ("fail", f"confirmed: {len(failing)} of its checks fail in {where}")
                if failing
                else ("inconclusive", f"not confirmed: it ran in {where} and no check of it failed there")
            )
        elif again is None:
            verdict, why = "inconclusive", f"not confirmed: {where} has no such check"
        elif again.verdict == "fail":
            verdict, why = "fail", f"confirmed by {where} ({again.message})"
        elif again.verdict == "error":
            verdict, why = "error", f"{where} could not measure it: {again.message}"
        else:
            verdict, why = "inconclusive", f"not confirmed by {where} ({again.verdict}: {again.message})"
        combined.append(replace(check, verdict=verdict, message=f"{check.message}; {why}"))
    return combined
