"""The synthetic-acceptance study (regimes/h200_synthetic_study.yaml): EAGLE-3's K and vLLM's
synthetic acceptance length swept together, every arm against one baseline, to measure what a
speculative step costs over K with no drafter's quality in the answer.

- The shipped file validates on this CPU machine, and each of its 12 expanded arms is one that
  vLLM 0.34 itself takes: its own parser, SpeculativeConfig's keys, and its own synthetic rule
  (``SpeculativeConfig._resolve_synthetic_acceptance_rates``, from the pinned release's sources in
  a subprocess, as tests/engine_parsers.py imports them), which resolves each length to the rates
  [L - 1, 0, ...] at every K. The harness refuses exactly the lengths vLLM refuses.
- A small copy of the study (K 1 and 5 x length 1.5 and 2.0, concurrency 1, three prompts, one
  start-up) runs end to end with ``bench run`` on the GPU stand-ins (tests/gpu_stand_ins/, as
  tests/test_gpu_rehearsal.py runs them): its point runs in this process (an in-process local
  executor), so the fake 8-GPU H200 node and the installed "vLLM 0.34.0" are its too. Every arm
  runs; each arm's tau is its synthetic length; the arms are flagged lossy and never compared on
  exactness; every window stores the engine's step count, which is what the stand-in ran; and
  the step time grows with K as the stand-in's engine does (``step_seconds``).

Nothing here ran on a GPU or on vLLM: the stand-ins answer vLLM's protocol (docs/gpu.md)."""

from __future__ import annotations

import io
import json
import os
import platform
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import yaml

import harness.run.study.run
from harness.cli import main
from harness.config.engines import get_adapter
from harness.config.engines.vllm import _synthetic_problems
from harness.core.probes.acceptance import SpecCounters
from harness.results import RunDir, Summary, read_json, read_records
from harness.results.records import WindowRecord
from harness.run.study.executors import JobOutcome, JobSpec, outcome_of
from harness.run.study.sweep import plan_study
from tests import engine_parsers
from tests.gpu_stand_ins.stand_in_engine import SERVED_K_ENV, STEP_S, step_seconds, steps, synthetic_rates
from tests.test_gpu_arm_devices import ARM_GPU, fake_nvml
from tests.test_gpu_rehearsal import _ServersOnTheirGpu

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "regimes" / "h200_synthetic_study.yaml"
STAND_INS = ROOT / "tests" / "gpu_stand_ins"
FAMILY = "eagle3"
KS = (1, 5)
LENGTHS = (1.5, 2.0)  # valid at K = 1 (at most K + 1): the product with K is valid throughout
PROMPTS = 3
# whole cycles at either length: 1.5 accepts 1, 0, 1, 0 (3 tokens a pair of steps), 2.0 accepts 1
# (2 tokens a step), so 18 tokens after the prefill's end every request on a whole cycle
MAX_TOKENS = 1 + 3 * 6
ARMS = [f"{FAMILY}_k{k}_synthetic_acceptance_length{length}" for k in KS for length in LENGTHS]
PINNED_RULE = """
import json, sys
from tests.engine_parsers import _check_vllm_case, vllm_parser
from vllm.config.speculative import SpeculativeConfig

cases = json.loads(sys.stdin.read())
parser = vllm_parser()
out = []
for case in cases:
    result = _check_vllm_case(parser, {"argv": case["argv"]}) if case.get("argv") else {}
    try:
        rates = SpeculativeConfig._resolve_synthetic_acceptance_rates(
            case["k"], case.get("rates"), case.get("length")
        )
        result["rates"] = rates
    except ValueError as exc:
        result["refused"] = str(exc)
    out.append(result)
print(json.dumps(out))
"""


# ---- the shipped file -----------------------------------------------------------------------------


def test_the_shipped_study_validates(capsys: pytest.CaptureFixture[str]) -> None:
    """`bench validate` passes without a GPU: 13 arms (K 1/2/3/5 x length 1.0/1.5/2.0 and the
    baseline) in one point, each synthetic arm named a lossy setting, no exactness probe."""
    assert main(["validate", str(SHIPPED)]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "valid study (regime 'h200_synthetic_study'): 1 point, 26 server start-ups" in said
    assert "no exactness probe (disabled)" in said
    assert said.count("'synthetic' is a lossy/synthetic acceptance mode") == 12


def _shipped_arms() -> tuple[Any, list[Any]]:
    study, plans = plan_study(SHIPPED)
    (plan,) = plans
    return plan, [arm for arm in plan.regime.arms if arm.method != "baseline"]


def test_every_arm_of_the_shipped_study_is_one_vllm_0_34_takes() -> None:
    """Each expanded arm's command line through vLLM 0.34's own parser and its speculative config's
    keys, and its synthetic length through 0.34's own rule: rates [L - 1, 0, ...] at every K, whose
    sum (the expected accepted drafts a step) is L - 1. Over a grid of K and lengths, the harness
    refuses exactly what vLLM refuses, and the vLLM stand-in resolves lengths and rate lists to
    vLLM's rates and refuses what it refuses."""
    sources = engine_parsers.vllm_sources("0.34.0")
    if sources is None:
        pytest.fail("vLLM 0.34.0's sources are not unpacked: run scripts/setup-cpu.sh")
    plan, arms = _shipped_arms()
    assert sorted((a.num_speculative_tokens, a.options["synthetic_acceptance_length"]) for a in arms) == [
        (k, length) for k in (1, 2, 3, 5) for length in (1.0, 1.5, 2.0)
    ]
    assert {a.options["rejection_sample_method"] for a in arms} == {"synthetic"}
    model = plan.resolve_models(build=False, build_trained=False)
    cases = [
        {
            "argv": engine_parsers.vllm_server_args(plan.launch_spec(arm, model, port=8000).argv),
            "k": arm.num_speculative_tokens,
            "length": arm.options["synthetic_acceptance_length"],
        }
        for arm in arms
    ]
    grid = [(k, length) for k in range(1, 6) for length in (0.5, 1.0, 1.5, 2.0, 2.5, 3.5, 6.0, 6.5)]
    cases += [{"k": k, "length": length} for k, length in grid]
    lists = [(3, [0.8, 0.6, 0.3]), (2, [0.5, 0.6]), (2, [0.5]), (1, [1.2]), (2, [1.0, 0.0])]
    cases += [{"k": k, "rates": rates} for k, rates in lists]
    cases += [{"k": 2}, {"k": 2, "length": 1.5, "rates": [0.5, 0.0]}]  # neither, both
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(sources), str(ROOT)]),
        "VLLM_TARGET_DEVICE": "cpu",
    }
    done = subprocess.run(
        [sys.executable, "-c", PINNED_RULE],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    for arm, case, result in zip(arms, cases[: len(arms)], results[: len(arms)], strict=True):
        assert result["unknown"] == [], arm.name
        spec = engine_parsers.speculative_json(case["argv"])
        assert set(spec) <= set(result["speculative_keys"]), arm.name
        length = case["length"]
        assert result["rates"] == [length - 1] + [0.0] * (arm.num_speculative_tokens - 1), arm.name
        assert 1 + sum(result["rates"]) == pytest.approx(length)
    on_grid = results[len(arms) : len(arms) + len(grid)]
    refused = [case for case, result in zip(grid, on_grid, strict=True) if "refused" in result]
    assert refused == [(k, length) for k, length in grid if not 1 <= length <= k + 1]
    regime = plan.regime
    for (k, length), result in zip(grid, on_grid, strict=True):
        options = {"rejection_sample_method": "synthetic", "synthetic_acceptance_length": length}
        arm = arms[0].model_copy(update={"num_speculative_tokens": k, "options": options})
        assert bool(_synthetic_problems(regime, arm)) == ("refused" in result), (k, length, result)
    for case, result in zip(cases[len(arms) + len(grid) :], results[len(arms) + len(grid) :], strict=True):
        options = {"rejection_sample_method": "synthetic"}
        options |= {f"synthetic_acceptance_{key}": case[key] for key in ("length", "rates") if key in case}
        arm = arms[0].model_copy(update={"num_speculative_tokens": case["k"], "options": options})
        assert bool(_synthetic_problems(regime, arm)) == ("refused" in result), (case, result)
    for case, result in zip(cases[len(arms) :], results[len(arms) :], strict=True):
        if "length" in case and "rates" in case or not ("length" in case or "rates" in case):
            continue  # the stand-in takes what the harness passed: checked above
        spec = {"rejection_sample_method": "synthetic"}
        spec |= {f"synthetic_acceptance_{key}": case[key] for key in ("length", "rates") if key in case}
        try:
            stand_in = synthetic_rates(case["k"], spec)
        except ValueError as exc:
            assert str(exc) == result.get("refused"), case
        else:
            assert "refused" not in result and stand_in == pytest.approx(result["rates"]), case


# ---- a small copy, end to end on the stand-ins ----------------------------------------------------


def _small_study(tmp_path: Path) -> Path:
    """The shipped study cut to K 1 and 5 x length 1.5 and 2.0, three prompts of MAX_TOKENS at
    concurrency 1, one start-up, no warm-up, and the stand-ins first on the servers' PYTHONPATH."""
    data = yaml.safe_load(SHIPPED.read_text())
    data["name"] = "synthetic_study_rehearsal"
    data["workloads"] = [str((SHIPPED.parent / w).resolve()) for w in data["workloads"]]
    data["load"] = {
        "concurrency": [1],
        "num_prompts": PROMPTS,
        "max_output_tokens": MAX_TOKENS,
        "ignore_eos": True,
        "warmup_requests": 0,
        "server_starts": 1,
    }
    data["sweep"]["arms"][FAMILY] = {
        "num_speculative_tokens": list(KS),
        "options.synthetic_acceptance_length": list(LENGTHS),
    }
    data["power"] = {"sample_period_s": 0.02}
    data["engine"]["env"] = {"PYTHONPATH": str(STAND_INS)}
    path = tmp_path / "synthetic_study.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


class _Done:
    """A point's job that has already ended (it ran in this process)."""

    def __init__(self, code: int) -> None:
        self.code = code
        self.job_id = f"local:{platform.node()}:{os.getpid()}"

    def poll(self) -> JobOutcome:
        return outcome_of(self.code)

    def interrupt(self) -> None:
        pass


class _InProcessExecutor:
    """The local executor, but each point's ``bench study-point`` runs in this process, on the GPUs
    its placement gave it, its output in the job's log: the fake NVML and the installed vLLM 0.34.0
    (this process's) are the point's too, where a child process would see the CPU machine."""

    name = "local"

    def submit(self, spec: JobSpec) -> _Done:
        assert spec.command[1:3] == ["-m", "harness.cli"] and spec.devices == (str(ARM_GPU),)
        with pytest.MonkeyPatch.context() as job:
            job.setenv("BENCH_EXECUTOR", "local")
            job.setenv("CUDA_VISIBLE_DEVICES", ",".join(spec.devices))
            job.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
            spec.log.parent.mkdir(parents=True, exist_ok=True)
            with open(spec.log, "w") as log, redirect_stdout(log):
                return _Done(main(spec.command[3:]))

    def attach(self, attempt: Any) -> None:
        return None

    def close(self) -> None:
        pass


def _h200_node(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process as one GPU of an 8 x H200 node (GPU 3, where NVML finds the servers) with
    vLLM 0.34.0 installed; points run in it."""
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(["NVIDIA H200"] * 8, processes=_ServersOnTheirGpu()))
    monkeypatch.setattr(get_adapter("vllm"), "installed_version", lambda: "vllm 0.34.0")
    monkeypatch.setattr(harness.run.study.run, "open_executor", lambda options, root: _InProcessExecutor())
    monkeypatch.setattr("harness.cli.signal.signal", lambda *args: None)  # pytest keeps its own handlers
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", str(ARM_GPU))
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.delenv("BENCH_EXECUTOR", raising=False)
    monkeypatch.delenv(SERVED_K_ENV, raising=False)


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The small study, run once with ``bench run``; its point's run read by the tests below."""
    tmp_path = tmp_path_factory.mktemp("synthetic_study")
    outcome, printed = tmp_path / "outcome.json", io.StringIO()
    with pytest.MonkeyPatch.context() as monkeypatch:
        _h200_node(monkeypatch)
        regime = _small_study(tmp_path)
        argv = ["run", str(regime), "--results-dir", str(tmp_path / "results"), "--json", str(outcome)]
        with redirect_stdout(printed):
            code = main(argv)
    root = Path(read_json(outcome)["dir"])
    run = RunDir(root / "points" / "p0")
    return {
        "code": code,
        "root": root,
        "run": run,
        "summary": Summary.model_validate(read_json(run.summary)),
        "printed": printed.getvalue(),
        "log": "".join(p.read_text() for p in sorted((root / "logs").glob("*.log"))),
    }


def test_every_arm_runs(study: dict[str, Any]) -> None:
    assert study["code"] == 0, study["printed"][-3000:] + study["log"][-3000:]
    summary, run = study["summary"], study["run"]
    assert [a.name for a in summary.arms] == ["baseline", *ARMS]
    for arm in summary.arms:
        status = run.read_status(arm.name)
        assert (status.status, status.mismatches, status.error) == ("ok", [], None), arm.name
    assert summary.mismatches == []
    for cell in summary.cells:
        assert (cell.requests_ok, cell.requests_errored) == (PROMPTS, 0), cell.arm
        assert cell.output_tokens == PROMPTS * MAX_TOKENS


def _arm_of(name: str) -> tuple[int, float]:
    k, length = name.removeprefix(f"{FAMILY}_k").split("_synthetic_acceptance_length")
    return int(k), float(length)


def test_tau_is_each_arm_s_synthetic_length(study: dict[str, Any]) -> None:
    """From vLLM's counters around each window: tau is the arm's length (within 2%), and only the
    first draft is ever accepted (rates [L - 1, 0, ...]); each request's own acceptance agrees."""
    for name in ARMS:
        k, length = _arm_of(name)
        (cell,) = study["summary"].cells_of(name)
        assert cell.num_speculative_tokens == k
        assert cell.tau == pytest.approx(length, rel=0.02), name
        assert cell.per_position_acceptance == pytest.approx([length - 1] + [0.0] * (k - 1)), name
        assert cell.draft_tokens == k * cell.drafts
        assert cell.acceptance_checks == []
        assert cell.prompt_tau is not None and len(cell.prompt_tau) == PROMPTS
        assert cell.prompt_tau == pytest.approx(dict.fromkeys(cell.prompt_tau, length), rel=0.02)


def test_the_arms_are_lossy_and_never_compared_on_exactness(study: dict[str, Any]) -> None:
    summary = study["summary"]
    verification = {a.name: a.verification for a in summary.arms}
    assert verification == {"baseline": None, **dict.fromkeys(ARMS, "synthetic")}
    assert len(summary.lossy_settings) == len(ARMS)
    assert all("'synthetic' is a lossy/synthetic acceptance mode" in s for s in summary.lossy_settings)
    assert not summary.exactness.applicable and summary.exactness.arms == {}
    assert all(cell.exactness is None for cell in summary.cells)
    assert not study["run"].noise_floor("baseline").exists()  # no second, unmeasured baseline pass


def _steps_per_request(k: int, length: float | None) -> int:
    """The engine steps one request takes on the stand-in: the prefill, then a step per token
    (baseline) or per verify step."""
    spec = {"rejection_sample_method": "synthetic", "synthetic_acceptance_length": length}
    rates = synthetic_rates(k, spec) if k else None
    return len(steps(list(range(MAX_TOKENS)), k, rates))


def test_the_windows_store_the_engine_s_steps(study: dict[str, Any]) -> None:
    """Every window's counters before and after carry the engine's step count (vLLM's
    iteration_tokens_total histogram count), and their difference is the steps the stand-in ran
    for the window's requests (concurrency 1: one request a step)."""
    for arm in ("baseline", *ARMS):
        k, length = _arm_of(arm) if arm != "baseline" else (0, None)
        (window,) = read_records(study["run"].windows(arm), WindowRecord)
        assert window.counters_before is not None and window.counters_after is not None, arm
        assert "engine_steps" in window.counters_before and "engine_steps" in window.counters_after
        delta = SpecCounters.from_json(window.counters_after).minus(
            SpecCounters.from_json(window.counters_before)
        )
        assert delta.engine_steps == PROMPTS * _steps_per_request(k, length), arm
        (cell,) = study["summary"].cells_of(arm)
        assert cell.engine_step_count == delta.engine_steps


def test_the_step_time_grows_with_k_as_the_stand_in_s_engine(study: dict[str, Any]) -> None:
    """The window's time over its steps: at least the stand-in's step (it sleeps that long), at
    most half again (the client's gaps between requests, a loaded machine), and relative to the
    baseline's within 15% of the known c(K) = 1 + K DRAFT_STEP_S / STEP_S (1.5 at K 1, 3.5 at 5)."""
    summary = study["summary"]
    (base,) = summary.cells_of("baseline")
    assert base.step_ms is not None and STEP_S * 1000 * 0.97 <= base.step_ms <= STEP_S * 1000 * 1.5
    for arm in ARMS:
        k, _ = _arm_of(arm)
        (cell,) = summary.cells_of(arm)
        known = step_seconds(k) * 1000
        assert cell.step_ms is not None and known * 0.97 <= cell.step_ms <= known * 1.5, (arm, cell.step_ms)
        assert cell.step_ms / base.step_ms == pytest.approx(step_seconds(k) / STEP_S, rel=0.15), arm


def test_the_cost_model_recovers_the_stand_in_s_step_cost(study: dict[str, Any]) -> None:
    """harness.derive.cost_model on the run: each arm's relative step cost is the stand-in's c(K) (within
    15%), whatever its acceptance, and the line it fits over K is c(K) = 1 + 0.5 K (its intercept
    within 0.15 of 1, its slope within 15% of DRAFT_STEP_S / STEP_S); one start-up: unverified."""
    from harness.derive.cost_model import cost_model

    model = cost_model(study["summary"])
    assert sorted(c.arm for c in model.costs) == sorted(ARMS)
    for cost in model.costs:
        assert cost.cost == pytest.approx(step_seconds(cost.k) / STEP_S, rel=0.15), cost.arm
        assert cost.low is None and cost.outcome == "unverified"
    (line,) = model.lines
    assert line.ks == (1, 1, 5, 5)
    assert line.intercept == pytest.approx(1.0, abs=0.15)
    assert line.slope == pytest.approx((step_seconds(1) - STEP_S) / STEP_S, rel=0.15)


def test_a_forced_acceptance_is_never_a_choice_nor_a_predictions_source(study: dict[str, Any]) -> None:
    """Synthetic arms measure a step's cost at a chosen acceptance: the study makes no best K,
    recommendation or policy of them, and the cost model predicts nothing from their acceptance."""
    from harness.derive.cost_model import cost_model
    from harness.derive.study.collect import load_study

    assert cost_model(study["summary"]).predictions == ()
    results = load_study(study["root"])
    assert results.observations and all(o.lossy for o in results.observations if o.arm in ARMS)
    assert all(r.best_arm is None for r in results.recommendations())
    assert results.best_ks() == [] and results.policies() == []


def test_the_studys_analysis_shows_each_points_step_costs(study: dict[str, Any]) -> None:
    """analysis.md gives each point's step costs beside break-even tau, from the points' runs."""
    from harness.derive.study.collect import load_study
    from harness.present.study.tables import markdown

    text = markdown(load_study(study["root"]))
    section = text.split("## Step cost and break-even acceptance", 1)[1].split("## Flips", 1)[0]
    for arm in ARMS:
        assert f"{arm} chat_mtbench @1: step" in section, arm
