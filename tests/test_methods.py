"""A method is one row (harness.config.methods): a toy method added to the table, and nowhere else,
is a method the regime accepts, both engines launch, the cost model extrapolates and the findings
read, as a toy engine and a toy metric already are (test_engine_registry, test_registry_views). It
runs in a fresh interpreter: the regime's method names are fixed when it is imported."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

TOY = textwrap.dedent(
    """
    import json, sys
    from harness.config import methods
    methods.METHODS["toy"] = methods.Method(
        "toy", draft_model=False, built=False, model_drafts=False, chain=True, prompt_lookup=True,
        one_k=False, sglang="TOY",
    )
    import yaml
    from harness.config.engines import get_adapter
    from harness.config.regime import load_regime
    from harness.derive.cost_model import CHAIN_METHODS

    data = yaml.safe_load(open(sys.argv[1]))
    data["workloads"] = [sys.argv[2]]
    data["arms"] = [{"name": "baseline", "method": "baseline"},
                    {"name": "toy_k3", "method": "toy", "num_speculative_tokens": 3}]
    path = sys.argv[3]

    def regime_on(engine):
        data["engine"] = {**data["engine"], "name": engine} if engine == "vllm" else {"name": engine}
        with open(path, "w") as handle:
            yaml.safe_dump(data, handle)
        return load_regime(path)

    regime = regime_on("vllm")
    vllm = get_adapter("vllm").launch_spec(regime, regime.arms[1], "/m", 1, "/py").argv
    config = json.loads(vllm[vllm.index("--speculative-config") + 1])
    regime = regime_on("sglang")
    sglang = get_adapter("sglang").launch_spec(regime, regime.arms[1], "/m", 1, "/py").argv
    print(json.dumps({
        "vllm": config,
        "sglang": sglang[sglang.index("--speculative-algorithm") + 1],
        "chain": "toy" in CHAIN_METHODS,
        "takes_no_draft": "toy" not in methods.names("draft_model"),
    }))
    """
)


def test_a_toy_method_is_one_row(tmp_path: Path) -> None:
    regime = ROOT / "tests" / "regimes" / "cpu_e2e.yaml"
    workload = ROOT / "workloads" / "code_humaneval.yaml"
    out = subprocess.run(
        [sys.executable, "-c", TOY, str(regime), str(workload), str(tmp_path / "toy.yaml")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    said = json.loads(out.stdout.splitlines()[-1])
    assert said["vllm"]["method"] == "toy" and said["vllm"]["num_speculative_tokens"] == 3
    assert said["sglang"] == "TOY" and said["chain"] and said["takes_no_draft"]


def test_the_regime_takes_exactly_the_tables_methods() -> None:
    import typing

    from harness.config.arms import SpecMethod
    from harness.config.methods import BASELINE, METHODS

    assert typing.get_args(SpecMethod) == (BASELINE, *METHODS)
