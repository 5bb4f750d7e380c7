"""The plan is finished before the runner starts (``harness.run.plan.prepare_run``): the engine's
version, this machine against the regime, the models and the drafters' fits, refusals included;
the runner only reads the frozen result. The checks' order is tested with the machine injected
(the engine's version, the environment) and model resolution recorded instead of run; a whole run
and its resume then go through the runner with a stand-in engine (benchmarks/stream_server.py).
tests/test_end_to_end.py runs the real engine."""

from __future__ import annotations

import ast
import dataclasses
import io
import json
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from harness.config.arms import Arm
from harness.config.engines import LaunchSpec, get_adapter
from harness.config.engines.served import ServedConfig
from harness.config.regime import Regime
from harness.core.errors import UserError
from harness.core.probes.acceptance import SpecCounters
from harness.run.drafters.fit import Fit
from harness.run.plan import Plan, RunPlan, describe_plan, plan_regime, prepare_run
from harness.run.runner import resume_run, run_regime

ROOT = Path(__file__).resolve().parent.parent
REGIME = ROOT / "tests" / "regimes" / "cpu_e2e.yaml"  # pins vllm 0.31.0


def _plan(monkeypatch: pytest.MonkeyPatch, installed: str | None = "0.32.0") -> tuple[Plan, list[str]]:
    """The e2e regime's plan on a machine with ``installed`` as the engine; the returned list
    records what was resolved, in order."""
    plan = plan_regime(REGIME)
    calls: list[str] = []
    monkeypatch.setattr(plan.adapter, "installed_version", lambda: installed)
    monkeypatch.setattr("harness.run.plan.collect_environment", lambda version: {"engine_version": version})

    def resolve(build: bool, console: Console | None = None) -> str:
        calls.append(f"resolve build={build}")
        return "/models/target"

    def fits(model: str) -> dict[str, Fit]:
        calls.append(f"fits {model}")
        return {"ngram_k4": Fit(problems=["arms.ngram_k4: the drafter's vocabulary is not the target's"])}

    monkeypatch.setattr(plan, "resolve_models", resolve)
    monkeypatch.setattr(plan, "drafter_fits", fits)
    return plan, calls


def _console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=200), out


def test_no_engine_refuses_before_anything_else(monkeypatch: pytest.MonkeyPatch) -> None:
    plan, calls = _plan(monkeypatch, installed=None)
    with pytest.raises(UserError, match="engine 'vllm' is not installed"):
        prepare_run(plan, _console()[0], allow_mismatch=True)
    assert calls == []


def test_a_mismatch_refuses_before_any_model_is_built(monkeypatch: pytest.MonkeyPatch) -> None:
    plan, calls = _plan(monkeypatch)
    with pytest.raises(UserError, match="this machine does not match the regime; nothing was started"):
        prepare_run(plan, _console()[0])
    assert calls == []  # nothing converted, no drafter built for a run that cannot start


def test_a_drafter_that_does_not_fit_refuses_after_the_build(monkeypatch: pytest.MonkeyPatch) -> None:
    plan, calls = _plan(monkeypatch, installed="0.31.0")  # the pinned version: the machine matches
    with pytest.raises(UserError, match="a drafter does not fit its arm; nothing was started"):
        prepare_run(plan, _console()[0])
    assert calls == ["resolve build=True", "fits /models/target"]


def test_allowed_mismatches_are_printed_and_carried_by_the_finished_plan(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plan, calls = _plan(monkeypatch)
    console, out = _console()
    ready = prepare_run(plan, console, allow_mismatch=True)
    assert calls == ["resolve build=True", "fits /models/target"]
    assert [m.split(":")[0] for m in ready.mismatches] == ["engine.version", "arms.ngram_k4"]
    printed = out.getvalue()
    assert printed.index("regime mismatch (allowed): engine.version") < printed.index("drafter mismatch")
    assert (ready.model, ready.engine_version, ready.environment) == (
        "/models/target",
        "0.32.0",
        {"engine_version": "0.32.0"},
    )
    assert ready.allow_mismatch and ready.lossy == ()
    # what the runner reads at every window, without reaching into the regime
    regime = plan.regime
    assert ready.description == describe_plan(plan) and ready.load is regime.load
    assert ready.baseline == "baseline" and ready.reference_pass and ready.distribution_samples is None
    assert ready.startup_timeout_s == 600 and ready.sampling.seed == 0 and ready.power is regime.power
    with pytest.raises(dataclasses.FrozenInstanceError):
        ready.model = "/elsewhere"  # type: ignore[misc]


def test_a_resumed_run_keeps_its_target(monkeypatch: pytest.MonkeyPatch) -> None:
    plan, calls = _plan(monkeypatch)
    ready = prepare_run(plan, _console()[0], allow_mismatch=True, resumed_model="/models/stored")
    assert ready.model == "/models/stored"
    assert calls == ["resolve build=True"]  # built (cached) drafters; fits were checked when it started
    assert [m.split(":")[0] for m in ready.mismatches] == ["engine.version"]


def test_the_runner_never_calls_into_the_plan() -> None:
    """Inside ``Runner`` no name from ``harness.run.plan`` but the RunPlan type, and no call on the plan
    object itself (``self.plan.x(...)``): it reads fields."""
    tree = ast.parse((ROOT / "harness" / "run" / "runner.py").read_text())
    imported = {
        alias.asname or alias.name
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module == "harness.run.plan"
        for alias in node.names
    }
    assert "RunPlan" in imported and "prepare_run" in imported  # the entry points prepare it
    runner = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Runner")
    used = {n.id for n in ast.walk(runner) if isinstance(n, ast.Name)} & imported
    assert used <= {"RunPlan"}
    calls = [
        ast.unparse(n.func)
        for n in ast.walk(runner)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and ast.unparse(n.func.value) == "self.plan"
    ]
    assert calls == []
    assert {f.name for f in dataclasses.fields(RunPlan)} >= {"load", "model", "drafters", "mismatches"}


class StandIn:
    """An engine adapter whose server is benchmarks/stream_server.py: vLLM-shaped streams, no model,
    no counters. It lets a whole run go through the runner on any machine."""

    name = "vllm"
    health_path = "/health"
    metrics_path = "/metrics"
    reset_prefix_cache_path = None
    acceptance_source = "server_counters"
    unix_socket = False  # the stream server listens on TCP

    def launch_spec(
        self, regime: Regime, arm: Arm, model: str, port: int, python: str, draft_model: str | None = None
    ) -> LaunchSpec:
        server = str(ROOT / "benchmarks" / "stream_server.py")
        return LaunchSpec([python, server, "--port", str(port), "--tokens-per-chunk", "2"])

    def request_fields(
        self, prompt_format: str, top_logprobs: int, template_kwargs: dict | None = None
    ) -> dict:
        return get_adapter("vllm").request_fields(prompt_format, top_logprobs, template_kwargs)

    def __getattr__(self, name: str) -> object:  # everything else as vLLM's adapter does it
        return getattr(get_adapter("vllm"), name)

    def server_figures(self, base_url: str) -> None:
        return None

    def read_spec_counters(self, base_url: str) -> SpecCounters:
        return SpecCounters()

    def reset_prefix_cache(self, base_url: str) -> bool | None:
        return None  # no reset route: asked once, not again

    def installed_version(self) -> str:
        return "vllm 0.31.0"  # the regime's pin

    def served_config(self, base_url: str, log_path: Path | None = None) -> ServedConfig:
        return ServedConfig()


def stand_in_regime(tmp_path: Path, regime_file: Path = REGIME) -> dict:
    """``regime_file``'s data for the stand-in engine: a model folder of its own (no weights), the
    humaneval workload, concurrency 2, no warm-up and no ramp (against the stand-in it streams
    hundreds of requests a second for its 5 s, ~10 s of this process's CPU for nothing these tests
    read: tests/test_ramp.py tests the ramp)."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    data = yaml.safe_load(regime_file.read_text())
    data["target"] = {"path": str(model), "dtype": "bfloat16", "max_model_len": 1024}
    data["workloads"] = [str(ROOT / "workloads" / "code_humaneval.yaml")]
    data["load"] |= {"concurrency": [2], "warmup_requests": 0}
    data["load"].pop("ramp", None)
    return data


def stand_in_run(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    regime_file: Path = REGIME,
    edit=None,
    adapter: StandIn | None = None,
    relative: bool = False,
    overrides=(),
    **run_options: bool,
):
    """A whole run through the runner with the stand-in engine (baseline and ngram_k4, one window
    each and no ramp, unless ``edit`` changes the regime's data): (the run, its summary, what it printed); the
    console stays for a resume."""
    data = stand_in_regime(tmp_path, regime_file)
    data["engine"]["env"] = {**data["engine"].get("env", {}), "BENCH_TEST_TOKEN": "planted-token-123"}
    if edit is not None:
        edit(data)
    regime = tmp_path / "stand_in.yaml"
    regime.write_text(yaml.safe_dump(data))
    monkeypatch.setattr("harness.run.plan.get_adapter", lambda name: adapter or StandIn())
    console, out = _console()
    if relative:  # as given on the command line, from the folder it is in
        regime = Path(regime.name)
    run, summary = run_regime(
        regime, tmp_path / "results", console, allow_mismatch=True, overrides=overrides, **run_options
    )
    return run, summary, out.getvalue(), console, out


def test_a_run_resumes_from_any_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 64: a run started as ``bench run stand_in.yaml`` recorded that relative path, so a
    resume from another directory could not find the regime file and said its secret "was not
    stored". The path is now recorded absolute; a relative one (an earlier run's) is found from the
    folders above the run."""
    monkeypatch.chdir(tmp_path)
    run, summary, _, console, out = stand_in_run(tmp_path, monkeypatch, relative=True)
    assert [a.status for a in summary.arms] == ["ok", "ok"], out.getvalue()
    record = json.loads((run.root / "regime.json").read_text())
    assert record["source_path"] == str(tmp_path / "stand_in.yaml")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    _, again = resume_run(run.root, console, allow_mismatch=True)
    assert [a.status for a in again.arms] == ["ok", "ok"]
    record["source_path"] = "stand_in.yaml"  # as an earlier run recorded it
    (run.root / "regime.json").write_text(json.dumps(record))
    _, again = resume_run(run.root, console, allow_mismatch=True)
    assert [a.status for a in again.arms] == ["ok", "ok"]
    (tmp_path / "stand_in.yaml").unlink()  # gone: the error says so, with the secret it was needed for
    with pytest.raises(UserError, match=r"BENCH_TEST_TOKEN: .* \(the regime file could not be read: "):
        resume_run(run.root, console, allow_mismatch=True)


def test_a_run_and_its_resume_go_through_the_finished_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = tmp_path / "model"
    run, summary, _, console, out = stand_in_run(tmp_path, monkeypatch)
    assert [a.status for a in summary.arms] == ["ok", "ok"], out.getvalue()
    record = json.loads((run.root / "regime.json").read_text())
    assert record["resolved_model"] == str(model) and isinstance(record["mismatches"], list)
    assert json.loads((run.root / "environment.json").read_text())["target_identity"]["local"]
    launch = json.loads((run.arm_dir("ngram_k4") / "launch.json").read_text())
    assert launch["argv"][1].endswith("stream_server.py")
    printed = out.getvalue()
    assert printed.index("Run directory") < printed.index("2 arms (baseline, ngram_k4)")
    # what a bench killed mid-run leaves: an engine log that printed a secret, never scrubbed
    (run.arm_dir("baseline") / "server.log").write_text("args: {'token': 'planted-token-123'}\n")
    _, again = resume_run(run.root, console, allow_mismatch=True)
    assert (run.arm_dir("baseline") / "server.log").read_text() == "args: {'token': '<redacted>'}\n"
    assert "already complete, kept" in out.getvalue() and [a.status for a in again.arms] == ["ok", "ok"]
    timing = json.loads((run.root / "timing.json").read_text())["invocations"]
    assert len(timing) == 2 and all(0 <= t["prepare_s"] <= t["wall_s"] for t in timing)
