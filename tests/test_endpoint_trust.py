"""A number from someone else's server is true or absent (issue 70): existing servers
(``arms[].endpoint``) that change under the harness. Each stand-in is the vLLM stand-in of
tests/gpu_stand_ins/ run as a deployment of its own (the harness neither starts nor stops it), told
by its environment to misbehave: restart mid-window (every counter back to 0), serve another model
after some requests, or speculate behind an arm that says ``method: baseline``. Each ends in a
re-measured start-up, a failed arm with its reason, or a refusal: never a silent number."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
import yaml

from harness.cli import main
from harness.results import RunDir, read_json, read_records
from harness.results.records import WindowRecord
from harness.run.server import Server, free_port
from tests.gpu_stand_ins.stand_in_engine import ACCEPTED_PER_STEP

ROOT = Path(__file__).resolve().parent.parent
STAND_INS = ROOT / "tests" / "gpu_stand_ins"
K = 4
# two whole cycles of the stand-in's acceptance pattern after the prefill's token
MAX_TOKENS = 1 + 2 * sum(min(a, K) + 1 for a in ACCEPTED_PER_STEP)
TAU = 1 + sum(min(a, K) for a in ACCEPTED_PER_STEP) / len(ACCEPTED_PER_STEP)
PROMPTS = 4  # requests per window: one window per round at one level


@contextmanager
def stand_in(tmp_path: Path, name: str, speculates: bool, **env: str) -> Iterator[str]:
    """A running vLLM stand-in (serving ``model-A``), its base URL; stopped after the block."""
    port = free_port()
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", "model-A"]
    argv += ["--served-model-name", "model-A", "--max-model-len", "1024", "--host", "127.0.0.1"]
    argv += ["--port", str(port)]
    if speculates:
        argv += ["--speculative-config", json.dumps({"method": "ngram", "num_speculative_tokens": K})]
    server = Server(argv, {"PYTHONPATH": str(STAND_INS), **env}, port, tmp_path / f"{name}.log", "/health")
    server.start()
    try:
        server.wait_ready(60)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


def _regime(tmp_path: Path, server_starts: int = 2, baseline_url: str | None = None) -> Path:
    """Baseline against ngram K=4 on existing servers: one level, PROMPTS requests a window."""
    data = yaml.safe_load((ROOT / "tests" / "regimes" / "cpu_e2e.yaml").read_text())
    data["name"] = "endpoint_trust"
    data["workloads"] = [str(ROOT / "workloads" / "code_humaneval.yaml")]
    data["load"] = {
        "concurrency": [1],
        "num_prompts": PROMPTS,
        "max_output_tokens": MAX_TOKENS,
        "warmup_requests": 0,
        "server_starts": server_starts,
    }
    path = tmp_path / "regime.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def bench(tmp_path: Path, *args: str) -> tuple[int, str, RunDir | None]:
    """``bench ARGS`` in this process: its exit code, what it said, its run directory (if any)."""
    out, err = io.StringIO(), io.StringIO()
    outcome = tmp_path / "outcome.json"
    with redirect_stdout(out), redirect_stderr(err):
        code = main([*args, "--json", str(outcome)] if args[0] == "run" else list(args))
    run = RunDir(Path(read_json(outcome)["dir"])) if outcome.is_file() else None
    return code, " ".join((out.getvalue() + err.getvalue()).split()), run


def run_on(tmp_path: Path, urls: dict[str, str], **regime: object) -> tuple[int, str, RunDir | None]:
    args = ["run", str(_regime(tmp_path, **regime)), "--results-dir", str(tmp_path / "results")]
    args += ["--no-calibration", "--allow-mismatch"]
    for name, url in urls.items():
        args += ["--endpoint", f"{name}={url}"]
    return bench(tmp_path, *args)


def windows(run: RunDir, arm: str) -> list[WindowRecord]:
    return read_records(run.windows(arm), WindowRecord)


def test_a_server_restarted_mid_window_is_measured_again_not_counted(tmp_path: Path) -> None:
    """The ngram server restarts as the 2nd request of round 2 ends: its counters fall to 0 within
    that window. The window's counters are never summed (no tau from "the counters since the
    restart"): round 2's start-up is measured again, and the record says why."""
    restart = str(PROMPTS + 2)
    with (
        stand_in(tmp_path, "baseline", speculates=False) as base,
        stand_in(tmp_path, "ngram", speculates=True, STAND_IN_RESTART_AFTER=restart) as ngram,
    ):
        code, said, run = run_on(tmp_path, {"baseline": base, "ngram_k4": ngram})
    assert code == 0 and run is not None, said[-3000:]
    kept = windows(run, "ngram_k4")
    assert [w.server_start for w in kept] == [0, 1]  # one window a round: round 2's measured again
    assert all(w.counter_delta().drafts > 0 for w in kept)
    status = run.read_status("ngram_k4")
    assert status.status == "ok" and len(status.remeasured) == 1, status
    assert "drafts fell" in status.remeasured[0] and "start-up 2" in status.remeasured[0]
    assert "measured again" in said and "drafts fell" in said
    summary = json.loads((run.root / "summary.json").read_text())
    (cell,) = [c for c in summary["cells"] if c["arm"] == "ngram_k4"]
    assert cell["tau"] == pytest.approx(TAU)
    # the restarted window is kept aside, never lost, with why its counters count nothing
    aside = read_records(run.root / "arms" / "ngram_k4.attempt-1" / "windows.jsonl", WindowRecord)
    assert [w.server_start for w in aside] == [0, 1] and aside[1].counters_broken, aside
    assert not aside[0].counters_broken and aside[1].others_tokens is None


def test_a_server_that_restarts_again_fails_its_arm_with_the_reason(tmp_path: Path) -> None:
    restarts = f"{PROMPTS + 2},{2 * PROMPTS + 2}"  # in round 2, and again in its re-measurement
    with (
        stand_in(tmp_path, "baseline", speculates=False) as base,
        stand_in(tmp_path, "ngram", speculates=True, STAND_IN_RESTART_AFTER=restarts) as ngram,
    ):
        code, said, run = run_on(tmp_path, {"baseline": base, "ngram_k4": ngram})
    assert run is not None, said[-3000:]
    status = run.read_status("ngram_k4")
    # the second time, drafts happened to read as many as before (2 requests since each restart):
    # only the generated-token counter, short of the window's own tokens, tells
    error = status.error or ""
    assert status.status == "failed" and "restarted or reset its counters" in error, status
    assert "again, in the start-up measured again" in error and len(status.remeasured) == 1
    assert "arm ngram_k4 failed" in said and code != 0


@pytest.mark.parametrize("after", [PROMPTS, PROMPTS + 2], ids=["as-round-1-ends", "mid-window"])
def test_another_model_behind_the_url_stops_the_arm_naming_both(tmp_path: Path, after: int) -> None:
    """The ngram server serves model-B from its ``after``-th request on: as round 1's window ends,
    or within round 2's. Either way it is seen as that window ends (the window recorded with what
    was served then), and the arm stops, naming both models: no request of the next round goes to
    model-B."""
    with (
        stand_in(tmp_path, "baseline", speculates=False) as base,
        stand_in(tmp_path, "ngram", speculates=True, STAND_IN_MODEL_AFTER=f"{after}:model-B") as ngram,
    ):
        code, said, run = run_on(tmp_path, {"baseline": base, "ngram_k4": ngram})
    assert run is not None and code != 0, said[-3000:]
    status = run.read_status("ngram_k4")
    error = status.error or ""
    assert status.status == "failed" and "model 'model-A' then, 'model-B' now" in error, status
    models = [w.served_model for w in windows(run, "ngram_k4")]
    assert models == (["model-B"] if after == PROMPTS else ["model-A", "model-B"])
    assert all(w.served_model == "model-A" for w in windows(run, "baseline"))
    assert "arm ngram_k4 failed" in said


def test_a_baseline_whose_server_speculates_fails_its_pin(tmp_path: Path) -> None:
    with (
        stand_in(tmp_path, "baseline", speculates=True) as base,
        stand_in(tmp_path, "ngram", speculates=True) as ngram,
    ):
        code, said, run = run_on(tmp_path, {"baseline": base, "ngram_k4": ngram}, server_starts=1)
    assert run is not None and code != 0, said[-3000:]
    status = run.read_status("baseline")
    assert status.status == "failed" and "this server speculates" in (status.error or ""), status
    assert "is method: baseline" in said


def test_two_arms_on_one_server_are_refused_unless_meant(tmp_path: Path) -> None:
    from harness.config.regime import load_regime
    from harness.core.errors import UserError
    from harness.core.overrides import flag_overrides, parse_set

    regime = _regime(tmp_path)
    same = flag_overrides(endpoints=["baseline=http://u:pw@Host:80/", "ngram_k4=http://host"])
    with pytest.raises(UserError, match=r"arms\[1\]\.endpoint: the same server as arms\[0\] \(baseline\)"):
        load_regime(regime, same)
    assert load_regime(regime, [*same, parse_set("allow_shared_endpoints=true")]).allow_shared_endpoints
    with stand_in(tmp_path, "one", speculates=False) as url:
        args = ["run", str(regime), "--results-dir", str(tmp_path / "results"), "--no-calibration"]
        args += ["--allow-mismatch", "--endpoint", f"baseline={url}", "--endpoint", f"ngram_k4={url}/"]
        args += ["--set", "allow_shared_endpoints=true"]
        code, said, run = bench(tmp_path, *args)
    assert run is not None, said[-3000:]
    for arm in ("baseline", "ngram_k4"):
        assert f"{arm}: one server with baseline, ngram_k4 (allow_shared_endpoints)" in said
    assert "against itself" in said


def test_counter_breaks_name_what_fell_and_a_short_generation_count() -> None:
    from harness.core.probes.acceptance import SpecCounters, counter_breaks

    before = SpecCounters(drafts=120, draft_tokens=480, accepted_tokens=200, accepted_per_position={0: 90})
    after = SpecCounters(drafts=3, draft_tokens=12, accepted_tokens=5, accepted_per_position={0: 2})
    grown = SpecCounters(drafts=130, draft_tokens=520, accepted_tokens=210, accepted_per_position={0: 95})
    assert counter_breaks(before, grown, 1000, 1084, 84) == []  # alone, every token its own
    assert counter_breaks(before, grown, 1000, 1500, 84) == []  # another tenant: not a break
    said = counter_breaks(before, after, None, None, 84)
    assert said[0] == "drafts fell from 120 to 3" and "accepted_per_position[0] fell from 90 to 2" in said
    assert counter_breaks(before, grown, 1000, 1042, 84) == [
        "generated tokens grew by 42, fewer than the window's own 84 (from 1,000 to 1,042)"
    ]
    assert counter_breaks(None, None, 1000, 40, 84) == ["generated tokens fell from 1,000 to 40"]


def test_a_window_whose_counters_fell_in_an_older_run_counts_nothing(tmp_path: Path) -> None:
    """A run written before the runner checked (or a file edited since): a window whose counters
    are lower after it than before is not summed into tau ("the counters since the restart")."""
    import shutil

    from harness.derive.summary import summarize
    from harness.results.raw import read_raw

    run = tmp_path / "run"
    shutil.copytree(ROOT / "tests" / "fixtures" / "run_v14_default", run)
    (run / "analysis.json").unlink()
    path = run / "arms" / "ngram_k4" / "windows.jsonl"

    def tau() -> tuple[float, list[float | None]]:
        (cell,) = [c for c in summarize(read_raw(run)).cells if c.arm == "ngram_k4"]
        return cell.tau, [r.tau for r in cell.per_repeat]

    whole, each = tau()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    restarted = dict(lines[1]["counters_before"], drafts=1.0, accepted_tokens=1.0, draft_tokens=4.0)
    lines[1]["counters_after"] = restarted | {"accepted_per_position": {"0": 1.0}}
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    now, now_each = tau()
    assert now_each[1] is None and now_each[:1] + now_each[2:] == each[:1] + each[2:]
    # the signed sum (what was shown before the check) is another number; the others' pool is it
    assert _pooled_tau(lines) != pytest.approx(now)
    assert now == pytest.approx(_pooled_tau([w for i, w in enumerate(lines) if i != 1])) == whole


def _pooled_tau(lines: list[dict]) -> float:
    drafts = sum(w["counters_after"]["drafts"] - w["counters_before"]["drafts"] for w in lines)
    accepted = sum(
        w["counters_after"]["accepted_tokens"] - w["counters_before"]["accepted_tokens"] for w in lines
    )
    return 1 + accepted / drafts
