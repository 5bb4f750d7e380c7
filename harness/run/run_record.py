"""The run's record (``regime.json``): written as a run begins, continued by ``--resume --rounds``.

What it holds is what the run measured under: the regime as run, its fingerprint, the workloads'
contents, the drafters' provenance, and what the plan found before anything started.
"""

from __future__ import annotations

import copy

from harness.core.errors import UserError
from harness.core.overrides import record as overrides_record
from harness.results import SCHEMA_VERSION, RunDir, read_run_record
from harness.results.records import RunRecord, WorkloadRecord
from harness.run.plan import RunPlan


def regime_record(plan: RunPlan) -> RunRecord:
    """The run's ``regime.json``, written before any arm: the regime as run (no secret in it), where
    it came from, what the command line set, and what the plan found before anything started."""
    return RunRecord(
        schema_version=SCHEMA_VERSION,
        source_path=str(plan.regime_path.resolve()),
        overrides=overrides_record(plan.overrides),
        fingerprint=plan.fingerprint(),
        served_endpoints=plan.served_endpoints,
        price_per_hour=plan.regime.price_per_hour(),
        near_tie_margin=plan.regime.near_tie_margin(),
        resolved_model=plan.model,
        regime=plan.regime.redacted().model_dump(mode="json"),  # no secret on disk
        # Per arm: where its drafter came from (untrained / published / trained here); tau depends on it.
        drafters={name: {"path": d.path, **d.provenance} for name, d in plan.drafters.items()},
        workloads=[
            WorkloadRecord(
                name=w.name,
                category=w.definition.category,
                prompt_format=w.definition.prompt_format,
                definition=w.definition.model_dump(mode="json"),
                content_sha256=w.content_sha256,
                prompt_ids=[p.prompt_id for p in w.prompts],
                # chat workloads: what every request carried besides its messages (regime over workload)
                chat=w.chat.model_dump(mode="json") if w.chat else None,
            )
            for w in plan.workloads
        ],
        mismatches=list(plan.mismatches),
        lossy_settings=list(plan.lossy),
        known_defects=list(plan.known_defects),
        engine_patches=[f"{p['upstream']} ({p['label']})" for p in plan.engine_patches],
    )


def continued_record(run: RunDir, rounds: int) -> RunRecord:
    """The run's record continued to ``rounds`` rounds in all (``bench run --resume RUN --rounds N``),
    not yet written: its design becomes a deciding one from its first look to ``rounds``
    (``load.server_starts: {min: its first look, max: rounds, decide: true}``, its windows kept, its
    budget dropped: the rounds asked for are the bound), so every interval is corrected for the looks
    the run has taken and may take. The fingerprint stays the run's: the conditions measured did not
    change, only how long. Recorded among the run's overrides. Nothing is changed until the run is
    ready to continue (``Runner.resume``)."""
    if run.schema_version != SCHEMA_VERSION:  # its raw files stay of their version: no mixing
        raise UserError(
            f"{run.root}: written by another harness version (schema {run.schema_version}, this one "
            f"writes {SCHEMA_VERSION}); continue it with that version, or start a new run"
        )
    record = read_run_record(run)
    regime = copy.deepcopy(record.regime)
    starts = regime["load"]["server_starts"]
    if isinstance(starts, int):
        first, most, kept = starts, starts, {}
    else:
        first = starts["min"] if starts.get("decide", True) else starts["max"]
        most, kept = starts["max"], {k: v for k, v in starts.items() if k != "budget_minutes"}
    if rounds <= most:
        raise UserError(
            f"{run.root}: its design already allows {most} rounds; --rounds must be more than that"
        )
    design = {**kept, "min": first, "max": rounds, "decide": True}
    regime["load"]["server_starts"] = design
    given = {"given": f"--rounds {rounds}", "path": "load.server_starts", "value": design}
    return record.model_copy(update={"regime": regime, "overrides": [*record.overrides, given]})
