"""What a run's workload pass did (``workload_pass.json``): the baseline's greedy pass over EVERY
prompt of each workload's pool on its first start-up, whose outputs give the covariate's workload
mean (``verdict.covariate``). Its requests are ``arms/<baseline>/workload_pass.jsonl``
(``RawArm.workload_pass``); this record says whether they were measured in this run, copied from a
pass kept from an earlier run (the cache: ``harness.run.workload_pass``), or why there is none.

Written by the run side: ``skipped`` as the run begins, ``measured`` or ``cached`` once the pass
is done. A run made before the pass existed has no such file (``RawRun.workload_pass_record`` is
None); a pass that applies but was not reached yet (the baseline's first start-up cut short) has
none either.
"""

from __future__ import annotations

from typing import Literal

from harness.results.records import ResultModel

WORKLOAD_PASS_FILE = "workload_pass.json"


class WorkloadPassPart(ResultModel):
    """One workload's pass over its whole pool."""

    workload: str
    status: Literal["measured", "cached"]  # sent in this run, or copied from the cache (no request)
    key: str  # the cache key: sha256 (24 hex) of everything its outputs depend on
    cache_path: str  # where the pass is kept for later runs (or was found)
    prompts: int  # the pool's prompts: one request each
    finished: int  # requests that finished with no error (a cached pass: all of them)
    seconds: float | None = None  # measured: the pass's wall seconds
    origin_run: str | None = None  # cached: the run (its id) the pass was measured in, where kept


class WorkloadPassRecord(ResultModel):
    schema_version: Literal[1] = 1
    # measured: at least one workload's pass was sent in this run; cached: every one was copied from the
    # cache; skipped: the pass does not apply (``reason``), the covariate's mean is not available
    status: Literal["measured", "cached", "skipped"]
    reason: str | None = None  # skipped: why, in words (harness.run.workload_pass.workload_pass_reason)
    concurrency: int | None = None  # closed loop, the regime's lowest level (at most 8)
    workloads: list[WorkloadPassPart] = []

    @property
    def prompts(self) -> int:
        return sum(part.prompts for part in self.workloads)

    @property
    def seconds(self) -> float | None:
        """The seconds this run spent sending the pass (None: nothing was measured)."""
        spent = [part.seconds for part in self.workloads if part.seconds is not None]
        return sum(spent) if spent else None
