"""Regression gates: check a run against its regime's floors, ceilings and golden tau, and against a
baseline run or the nights before it, without failing on noise. By subject:

- ``evaluate``: every gate of the regime on every cell it covers, and the exit code (3 infrastructure
  error, 1 regression, 0 pass);
- ``limits``: the run's own checks: floors and ceilings on start-up samples, a speedup's from its
  estimate;
- ``relative``: the two-run checks: a maximum regression against a baseline run on start-up samples,
  each run's night term in the variance, and the refusal to compare runs made under different
  conditions;
- ``confirm``: ``--confirm`` re-runs the failing arms on fresh start-ups: a check fails only if it
  fails in both runs.

The nightly gate against the history's nights is ``harness.derive.history.gate``; what a gate reads
from a run is ``harness.derive.samples.RunView``; the checks as stored (``RUN_DIR/gate/checks.json``)
are ``harness.results.gate``.
"""
