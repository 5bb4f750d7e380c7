"""Schema migrations (harness.results.migrations), each step on a stored old file:

- tests/fixtures/run_v1: a version-1 run recorded from the real CPU engine (regime.json, statuses,
  summary.json);
- tests/fixtures/run_v3_smoke: a version-3 run recorded from the real CPU engine (regime.json, statuses);
- tests/fixtures/study_v1: a version-1 study.json as the harness wrote it before executors existed;
- tests/fixtures/summary_v5.json: the summary.json the version-5 harness (commit 8a4dfb4^, the last
  before version 6) derived from run_v1's raw files, trimmed by hand to the code_humaneval cells and
  category at concurrency 1 and the first exactness entry of each block.

Steps a fixture's version skips (regime.json 2, 4 and 5) run on the stored file's output of the steps
before them, so every step runs on what a real old file becomes."""

from __future__ import annotations

import copy
import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from harness.config.regime import Regime
from harness.core.errors import UserError
from harness.derive.intervals import Estimate
from harness.derive.summary import summarize
from harness.results import SCHEMA_VERSION, RunDir, load_summary, parse_summary, read_run_record
from harness.results.migrations import Migrations, run_record, status, study, summary, upgrade
from harness.results.model import SpeedupEstimate
from harness.results.study.record import StudyDir, StudyRecord

FIXTURES = Path(__file__).parent / "fixtures"
RUN_V1, RUN_V3 = FIXTURES / "run_v1", FIXTURES / "run_v3_smoke"


def _json(path: Path) -> Any:
    return json.loads(path.read_text())


def _pure(step: Any, data: dict[str, Any]) -> dict[str, Any]:
    """``step(data)``, checking that it left its input as it was."""
    before = copy.deepcopy(data)
    out = step(data)
    assert data == before, f"{step.__module__}.{step.__name__} changed its input"
    return out


def _stepwise(migrations: Migrations, data: dict[str, Any], start: int) -> dict[str, Any]:
    """Every step from version ``start`` on, one at a time (the identity where a version has none):
    each step must move a versioned file's version by exactly one."""
    for version in range(start, migrations.current):
        step = migrations.steps.get(version)
        if step is None:
            continue
        data = _pure(step, data)
        if "schema_version" in data:
            assert data["schema_version"] == version + 1, step.__name__
    return {**data, "schema_version": migrations.current} if "schema_version" in data else data


def test_each_kind_reads_up_to_the_version_it_writes() -> None:
    for module in (run_record, status, summary):
        assert module.MIGRATIONS.current == SCHEMA_VERSION  # a run's files share one numbering
    assert study.MIGRATIONS.current == StudyRecord.model_fields["schema_version"].default == 2
    for module in (run_record, status, summary, study):
        found = module.MIGRATIONS
        assert all(step.__name__ == f"migrate_v{n}" for n, step in found.steps.items())
        # every version is said once: a step where it changed the file, else what it added, in words
        assert sorted([*found.steps, *found.history]) == list(range(1, found.current))


@pytest.mark.parametrize("version", [SCHEMA_VERSION + 1, 99])
def test_a_newer_version_is_refused_with_a_hint(tmp_path: Path, version: int) -> None:
    newer = "schema_version .* is not supported by this harness .*written by a newer harness: upgrade"
    with pytest.raises(UserError, match=newer):
        parse_summary({**_json(RUN_V1 / "summary.json"), "schema_version": version}, "summary.json")
    run = tmp_path / "run"
    shutil.copytree(RUN_V1, run)
    (run / "regime.json").write_text(json.dumps({**_json(RUN_V1 / "regime.json"), "schema_version": version}))
    with pytest.raises(UserError, match=f"regime.json: {newer}"):
        read_run_record(RunDir(run))
    with pytest.raises(UserError, match=f"status.json: {newer}"):  # a status is of its run's version
        RunDir(run).read_status("baseline")
    (tmp_path / "study.json").write_text(json.dumps({**_json(FIXTURES / "study_v1" / "study.json"),
                                                     "schema_version": 3}))  # fmt: skip
    with pytest.raises(UserError, match=f"study.json: {newer}"):
        StudyDir(tmp_path).read()


@pytest.mark.parametrize("version", [0, None, "2", True])
def test_a_version_that_never_existed_is_refused(version: object) -> None:
    never = "is not supported by this harness .*use the harness version that wrote"
    with pytest.raises(UserError, match=never):
        upgrade({"schema_version": version}, summary.MIGRATIONS, "summary.json")
    with pytest.raises(UserError, match="not supported"):
        upgrade(["not", "an", "object"], summary.MIGRATIONS, "summary.json")


def test_regime_json_v1_gains_its_drafters() -> None:
    stored = _json(RUN_V1 / "regime.json")
    assert stored["schema_version"] == 1 and "drafters" not in stored
    step = _pure(run_record.migrate_v1, stored)
    assert step["drafters"] == {} and step["schema_version"] == 2
    assert {k: v for k, v in step.items() if k not in ("drafters", "schema_version")} == {
        k: v for k, v in stored.items() if k != "schema_version"
    }
    current = _stepwise(run_record.MIGRATIONS, stored, 1)
    assert current == read_run_record(RunDir(RUN_V1)).model_dump(mode="json", exclude_unset=True)
    assert all(w["chat"] is None for w in current["workloads"])  # migrate_v3 ran too
    Regime.model_validate(current["regime"])  # today's strict model reads the migrated regime


def test_regime_json_v3_workloads_record_that_they_sent_no_chat_settings() -> None:
    stored = _json(RUN_V3 / "regime.json")
    assert stored["schema_version"] == 3 and all("chat" not in w for w in stored["workloads"])
    step = _pure(run_record.migrate_v3, stored)
    assert [w["chat"] for w in step["workloads"]] == [None] * len(stored["workloads"])
    assert [{k: v for k, v in w.items() if k != "chat"} for w in step["workloads"]] == stored["workloads"]
    assert step["drafters"] == stored["drafters"] and step["drafters"]  # kept, not replaced
    current = _stepwise(run_record.MIGRATIONS, stored, 3)
    assert current == read_run_record(RunDir(RUN_V3)).model_dump(mode="json", exclude_unset=True)
    Regime.model_validate(current["regime"])


@pytest.mark.parametrize("run", [RUN_V1, RUN_V3], ids=["v1", "v3"])
def test_a_status_from_before_server_starts_lists_its_one_start_up(run: Path) -> None:
    version = _json(run / "regime.json")["schema_version"]
    stored = _json(run / "arms" / "baseline" / "status.json")
    assert "startups_s" not in stored and "schema_version" not in stored
    current = _stepwise(status.MIGRATIONS, stored, version)
    assert current == {**stored, "startups_s": [stored["startup_s"]]}
    assert RunDir(run).read_status("baseline").startups_s == [stored["startup_s"]]


def test_status_migrate_v5_without_a_start_up_and_with_a_list_already() -> None:
    failed = {"status": "failed", "phase": "startup", "error": "engine exited with status 1"}
    assert status.migrate_v5(failed) == {**failed, "startups_s": []}  # never became ready
    written = {"status": "ok", "startup_s": 3.0, "startups_s": [3.0, 4.0]}  # a resumed run, written now
    assert status.migrate_v5(written) == written


def test_summary_v1_windows_become_cells() -> None:
    stored = _json(RUN_V1 / "summary.json")
    step = _pure(summary.migrate_v1, stored)
    assert step["cells"] == stored["windows"] and "windows" not in step and step["unread_lines"] == []
    current = _stepwise(summary.MIGRATIONS, stored, 1)
    assert parse_summary(current, "test") == load_summary(RUN_V1 / "summary.json")
    assert [a["startups_s"] for a in current["arms"]] == [[a["startup_s"]] for a in stored["arms"]]


def test_summary_v5_as_the_v5_harness_wrote_it_reads_as_todays_derivation() -> None:
    stored = _json(FIXTURES / "summary_v5.json")
    assert stored["schema_version"] == 5 and all("startups_s" not in a for a in stored["arms"])
    step = _pure(summary.migrate_v5, stored)
    assert [a["startups_s"] for a in step["arms"]] == [[a["startup_s"]] for a in stored["arms"]]
    migrated = load_summary(FIXTURES / "summary_v5.json")
    derived = summarize(RUN_V1)  # the same raw files, derived by today's harness
    # how drafts were verified and sampled came with version 8: "not recorded" in a migrated file
    unrecorded = {"verification": None, "draft_sampling": None}
    assert migrated.arms == [a.model_copy(update=unrecorded) for a in derived.arms]
    assert migrated.exactness.applicable
    for old in stored["cells"]:  # today's numbers are version 5's, to the last bit
        cell = derived.cell(old["arm"], old["workload"], old["concurrency"])
        today = cell.model_dump(mode="json") | SpeedupEstimate.columns(cell.estimate)  # version 14's layout
        assert _as_old(today, old) == old


def _as_old(new: Any, old: Any) -> Any:
    """``new`` with only the keys ``old`` has, at every depth (later versions add fields)."""
    if isinstance(old, dict) and isinstance(new, dict):
        return {key: _as_old(new[key], value) for key, value in old.items()}
    if isinstance(old, list) and isinstance(new, list):
        return [_as_old(n, o) for n, o in zip(new, old, strict=True)]
    return new


SUMMARIES = sorted(FIXTURES.rglob("summary*.json"))


@pytest.mark.parametrize("path", SUMMARIES, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_every_stored_summary_migrates_to_nested_estimates(path: Path) -> None:
    """Version 15: every fixture's ``summary.json`` reaches the current version with no flat
    ``speedup_*`` field left beside the point, validates, and keeps each stored value in its
    ``estimate`` (``SpeedupEstimate.columns`` gives version 14's fields back)."""
    stored = _json(path)
    current = _stepwise(summary.MIGRATIONS, stored, stored.get("schema_version"))
    assert current["schema_version"] == SCHEMA_VERSION == 16
    parsed = parse_summary(current, str(path))
    for kind in ("cells", "categories", "ramp"):
        for record in current.get(kind, []):
            assert not [key for key in record if key.startswith("speedup_")]
    if stored["schema_version"] == 14:
        step = _pure(summary.migrate_v14, stored)
        for kind in ("cells", "categories", "ramp"):
            for old, new in zip(stored.get(kind, []), getattr(parsed, kind), strict=True):
                today = SpeedupEstimate.columns(new.estimate) | {"speedup": new.speedup}
                assert {key for key in old if key.startswith("speedup")} <= set(today)
                assert today == {key: old.get(key) for key in today}
        assert step["schema_version"] == 15


def test_study_v1_reads_as_a_local_study_without_jobs() -> None:
    stored = _json(FIXTURES / "study_v1" / "study.json")
    assert stored["schema_version"] == 1 and "executor" not in stored
    step = _pure(study.migrate_v1, stored)
    assert step["schema_version"] == 2 and step["executor"] == {"name": "local"}
    assert [p["attempts"] for p in step["points"]] == [[], []]
    assert StudyDir(FIXTURES / "study_v1").read() == StudyRecord.model_validate(step)


def test_v9_files_read_without_turns_or_prefix_cache_counts() -> None:
    """Version 10: windows and cells gained a conversation's ``turn`` and the prefix cache's counts;
    a version-9 summary, status and run record are otherwise unchanged."""
    v9 = {"schema_version": 9, "cells": [{"arm": "a"}], "arms": []}
    assert upgrade(v9, summary.MIGRATIONS, "summary.json") == {
        **v9,
        "schema_version": SCHEMA_VERSION,
    }  # as it is
    assert upgrade({"status": "ok"}, status.MIGRATIONS, "status.json", 9) == {"status": "ok"}
    assert (
        upgrade({"schema_version": 9}, run_record.MIGRATIONS, "regime.json")["schema_version"]
        == SCHEMA_VERSION
    )


def test_v10_files_read_as_one_look() -> None:
    """Version 11: cells gained ``speedup_looks`` (a deciding design's looks; absent: 1, a fixed
    number of rounds); a version-10 summary, status and run record are otherwise unchanged."""
    v10 = {"schema_version": 10, "cells": [{"arm": "a", "speedup_df": 2}], "arms": []}
    assert upgrade(v10, summary.MIGRATIONS, "summary.json") == {
        **v10,
        "schema_version": SCHEMA_VERSION,
        "cells": [{"arm": "a", "estimate": {"df": 2}}],  # nested by version 15
    }  # as it is
    assert upgrade({"status": "ok"}, status.MIGRATIONS, "status.json", 10) == {"status": "ok"}
    assert (
        upgrade({"schema_version": 10}, run_record.MIGRATIONS, "regime.json")["schema_version"]
        == SCHEMA_VERSION
    )


def test_v11_files_read_with_bonferroni_looks() -> None:
    """Version 12: cells gained ``speedup_first_look`` (the rounds at a deciding design's first look,
    to which the looks' level is fitted); a version-11 cell has none, and its looks keep the
    Bonferroni level its stored interval was derived at, so a view's winner correction agrees with it."""
    v11 = {"schema_version": 11, "cells": [{"arm": "a", "speedup_looks": 5}], "arms": []}
    assert upgrade(v11, summary.MIGRATIONS, "summary.json") == {
        **v11,
        "schema_version": SCHEMA_VERSION,
        "cells": [{"arm": "a", "estimate": {"looks": 5}}],  # nested by version 15
    }  # as it is
    assert upgrade({"status": "ok"}, status.MIGRATIONS, "status.json", 11) == {"status": "ok"}
    assert (
        upgrade({"schema_version": 11}, run_record.MIGRATIONS, "regime.json")["schema_version"]
        == SCHEMA_VERSION
    )
    old = Estimate(1.1, rounds=3, df=4, log_se=0.02, looks=5)
    assert old.level() == pytest.approx(0.99) and old.level(2) == pytest.approx(0.995)
    fitted = replace(old, first_look=2, model_arms=3)  # what version 12 stores
    assert 0.95 < fitted.level() < 0.99 and 0.975 < fitted.level(2) < 0.995
    one_look = Estimate(1.1, rounds=3, df=4, log_se=0.02)  # a version-11 winner: Bonferroni, as before
    assert one_look.level(2) == pytest.approx(0.975) and replace(one_look, model_arms=3).level(2) < 0.975


def test_summary_v8_cells_read_without_the_new_acceptance_figures() -> None:
    """Version 9: cells gained accepted_past_stop and prompt_tau, which a version-8 summary lacks
    (read as not derived); a version-8 status and run record are unchanged."""
    v8 = {"schema_version": 8, "cells": [{"arm": "a"}], "arms": []}
    assert upgrade(v8, summary.MIGRATIONS, "summary.json") == {
        **v8,
        "schema_version": SCHEMA_VERSION,
    }  # as it is
    assert upgrade({"status": "ok"}, status.MIGRATIONS, "status.json", 8) == {"status": "ok"}
    assert (
        upgrade({"schema_version": 8}, run_record.MIGRATIONS, "regime.json")["schema_version"]
        == SCHEMA_VERSION
    )


def test_summary_v7_gains_what_it_knew_of_its_engine() -> None:
    """Version 8: the known defects a run was forced through and the engine patches it ran with;
    a version-7 run had neither."""
    v7 = {"schema_version": 7, "cells": [], "arms": []}
    assert _pure(summary.migrate_v7, v7) == {
        **v7,
        "schema_version": 8,
        "known_defects": [],
        "engine_patches": [],
    }


def test_a_run_record_that_is_not_one_is_refused_naming_its_field(tmp_path: Path) -> None:
    """``regime.json`` is a typed record: a hand-edited value is an error naming the file and field,
    not a ``KeyError`` or a wrong number later (a margin read as text, a workload without its hash)."""
    run = tmp_path / "run"
    shutil.copytree(RUN_V3, run)
    stored = _json(run / "regime.json")
    (run / "regime.json").write_text(json.dumps({**stored, "near_tie_margin": "wide"}))
    with pytest.raises(UserError, match=r"regime.json: near_tie_margin: Input should be a valid number"):
        read_run_record(RunDir(run))
    workloads = [{k: v for k, v in w.items() if k != "content_sha256"} for w in stored["workloads"]]
    (run / "regime.json").write_text(json.dumps({**stored, "workloads": workloads}))
    with pytest.raises(UserError, match=r"regime.json: workloads.0.content_sha256: Field required"):
        read_run_record(RunDir(run))
