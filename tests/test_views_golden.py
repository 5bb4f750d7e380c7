"""The numbers every view shows, pinned on the stored runs: `bench show` (at 200 and 80 columns),
`bench report`, `bench export` and `bench gate` on tests/fixtures/run_v1 and run_v3_smoke must
give what tests/fixtures/views/ holds. A refactor that moves code must leave these byte for byte;
a change that means to move a number or a layout re-writes them with

    BENCH_UPDATE_VIEWS=1 .venv/bin/python -m pytest tests/test_views_golden.py

and the diff of tests/fixtures/views/ is what a reviewer reads. The report's embedded figures
are replaced by the SHA-256 of their PNG bytes, so the page's text stays readable in a diff while a
changed figure still fails."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
VIEWS = FIXTURES / "views"
RUNS = ("run_v1", "run_v3_smoke")
SHOWN = (
    *RUNS,
    "run_v12_default",
    "run_v12_provisional",
    "run_v12_decide",
)  # two rounds (quiet, busy), 2-4 deciding
UPDATE = os.environ.get("BENCH_UPDATE_VIEWS") == "1"


def _bench(*args: str, columns: int = 200) -> str:
    env = {**os.environ, "COLUMNS": str(columns), "TERM": "dumb", "NO_COLOR": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True, cwd=ROOT, env=env
    )
    return f"exit {proc.returncode}\n{proc.stdout}{proc.stderr}"


def _images_hashed(html: str) -> str:
    def digest(match: re.Match[str]) -> str:
        return f"data:image/png;sha256,{hashlib.sha256(match.group(1).encode()).hexdigest()}"

    return re.sub(r"data:image/png;base64,([A-Za-z0-9+/=]+)", digest, html)


def _check(name: str, text: str, tmp_path: Path) -> None:
    text = text.replace(str(tmp_path), "TMP").replace(str(ROOT), "ROOT")
    golden = VIEWS / name
    if UPDATE:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert golden.exists(), f"{golden} missing: run with BENCH_UPDATE_VIEWS=1 to write it"
    assert text == golden.read_text(), f"{name} differs from {golden} (BENCH_UPDATE_VIEWS=1 re-writes it)"


@pytest.mark.parametrize("run", SHOWN)
@pytest.mark.parametrize("columns", [200, 80])
def test_show(run: str, columns: int, tmp_path: Path) -> None:
    _check(f"{run}.show.{columns}.txt", _bench("show", f"tests/fixtures/{run}", columns=columns), tmp_path)


@pytest.mark.parametrize("run", SHOWN)
def test_show_minilab(run: str, tmp_path: Path) -> None:
    _check(f"{run}.minilab.md", _bench("show", f"tests/fixtures/{run}", "--minilab"), tmp_path)


@pytest.mark.parametrize("run", RUNS)
def test_report(run: str, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    log = _bench("report", f"tests/fixtures/{run}", "-o", str(out))
    _check(f"{run}.report.html", log + _images_hashed(out.read_text()), tmp_path)


@pytest.mark.parametrize("run", RUNS)
def test_export(run: str, tmp_path: Path) -> None:
    log = _bench("export", f"tests/fixtures/{run}", "-o", str(tmp_path / "export"))
    tables = "".join(
        f"== {path.name}\n{path.read_text()}" for path in sorted((tmp_path / "export").iterdir())
    )
    _check(f"{run}.export.txt", log + tables, tmp_path)


GATES = """gates:
  rules:
    - {arm: ngram_k4, metric: tau, min: 1.5}
    - {arm: "*", metric: speedup, min: 0.9}
    - {arm: baseline, metric: tpot_ms_p50, max: 200}
    - {arm: "*", metric: output_tok_s, max_regression_pct: 5}
"""


def test_gate(tmp_path: Path) -> None:
    junit, markdown = tmp_path / "junit.xml", tmp_path / "summary.md"
    gates = tmp_path / "gates.yaml"
    regime = (ROOT / "tests" / "regimes" / "cpu_e2e.yaml").read_text()
    gates.write_text(regime.replace("../../workloads/", f"{ROOT}/workloads/") + GATES)
    # a copy under another run id (the gate also writes RUN_DIR/gate/checks.json, which the report
    # shows); under its own id it would be the baseline itself, which the gate refuses
    run = tmp_path / "run_v1_again"
    shutil.copytree(FIXTURES / "run_v1", run)
    env_summary = os.environ.pop("GITHUB_STEP_SUMMARY", None)
    try:
        log = _bench(
            "gate", str(run), "--baseline", "tests/fixtures/run_v1", "--gates", str(gates),
            "--junit", str(junit), "--markdown", str(markdown),
        )  # fmt: skip
    finally:
        if env_summary is not None:
            os.environ["GITHUB_STEP_SUMMARY"] = env_summary
    junit_text = re.sub(r'(time|timestamp)="[^"]*"', r'\1="T"', junit.read_text())
    _check(
        "run_v1.gate.txt", f"{log}== summary.md\n{markdown.read_text()}== junit.xml\n{junit_text}", tmp_path
    )
