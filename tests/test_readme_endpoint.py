"""The README's `--endpoint` example runs as written (issue 73, item 4): its command, with only the
two servers' addresses replaced by two vLLM stand-ins (tests/test_endpoint_trust.py's), exits 0.
Flags appended for the test only make it short or say what a stand-in is not: fewer prompts and
rounds, its own results folder, no calibration, and --allow-mismatch (a stand-in reports vLLM
0.34.0; the regime pins the CPU build 0.32.0). A regime with an arm that has no server is refused
with the `--arms` that keeps exactly the arms that have one."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from harness.config.regime import load_regime
from harness.core.errors import UserError
from harness.core.overrides import flag_overrides
from tests.test_endpoint_trust import bench, stand_in

ROOT = Path(__file__).resolve().parent.parent
SHORT = ["--num-prompts", "2", "--set", "load.server_starts=2", "--set", "load.warmup_requests=0"]


def _readme_command() -> list[str]:
    (line,) = [
        line.strip()
        for line in (ROOT / "README.md").read_text().splitlines()
        if line.startswith("    bench run ") and "--endpoint" in line
    ]
    return shlex.split(line)[1:]  # without "bench"


def test_the_readmes_endpoint_example_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = _readme_command()
    monkeypatch.chdir(ROOT)  # the README's paths are the repository's
    with (
        stand_in(tmp_path, "baseline", speculates=False) as base,
        stand_in(tmp_path, "ngram", speculates=True) as ngram,
    ):
        servers = {"baseline": base, "ngram_k4": ngram}
        given = [re.sub(r"^(\w+)=http://\S+$", lambda m: f"{m[1]}={servers[m[1]]}", a) for a in argv]
        assert given.count("--endpoint") == 2 and given != argv  # both addresses replaced, nothing else
        extra = ["--results-dir", str(tmp_path / "results"), "--no-calibration", "--allow-mismatch", *SHORT]
        code, said, run = bench(tmp_path, *given, *extra)
    assert code == 0 and run is not None, said[-3000:]
    assert {s.name for s in (run.root / "arms").iterdir()} == {"baseline", "ngram_k4"}


def test_an_arm_without_a_server_is_refused_with_the_arms_to_keep() -> None:
    endpoints = ["baseline=http://127.0.0.1:1", "ngram_k4=http://127.0.0.1:2"]
    with pytest.raises(
        UserError, match=re.escape("measure only the arms with a server (bench run --arms ngram_k4)")
    ):
        load_regime(ROOT / "regimes" / "cpu_smoke.yaml", flag_overrides(endpoints=endpoints))
    kept = load_regime(
        ROOT / "regimes" / "cpu_smoke.yaml", flag_overrides(arms="ngram_k4", endpoints=endpoints)
    )
    assert [arm.name for arm in kept.arms] == ["baseline", "ngram_k4"]  # what the suggestion gives: valid
    with pytest.raises(UserError, match="the baseline always runs: --arms cannot leave it out"):
        load_regime(ROOT / "regimes" / "cpu_smoke.yaml", flag_overrides(endpoints=endpoints[1:]))
