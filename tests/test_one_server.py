"""``bench run REGIME --endpoint URL``: one running server, measured as the regime's baseline arm
alone and compared with nothing (issue 73, item 4): no speedup and no verdict, each window's tok/s
with its 95% interval over the rounds; the report renders; a URL alone beside ARM=URL is refused."""

from __future__ import annotations

from pathlib import Path

from harness.results import read_json
from tests.test_endpoint_trust import bench, stand_in

SHORT = ["--num-prompts", "2", "--set", "load.server_starts=2", "--set", "load.warmup_requests=0"]


def test_one_server_alone_gets_its_numbers_and_their_spread(tmp_path: Path) -> None:
    with stand_in(tmp_path, "only", speculates=False) as url:
        code, said, run = bench(
            tmp_path, "run", "regimes/cpu_default.yaml", "--endpoint", url,
            "--results-dir", str(tmp_path / "results"), "--no-calibration", "--allow-mismatch", *SHORT,
        )  # fmt: skip
    assert code == 0 and run is not None, said[-3000:]
    assert {p.name for p in (run.root / "arms").iterdir()} == {"baseline"}
    assert "one server, compared with nothing:" in said and "(95% over its rounds)" in said
    assert "one server, nothing to compare it with: no speedup and no verdict" in said
    record = read_json(run.root / "regime.json")
    assert [o["given"] for o in record["overrides"]][1] == f"--endpoint {url}"
    assert record["regime"]["arms"] == [{**record["regime"]["arms"][0], "endpoint": url}]
    summary = read_json(run.summary)
    (cell,) = summary["cells"]
    assert cell["arm"] == "baseline" and cell["output_tok_s"] > 0 and cell["repeats"] == 2
    page = tmp_path / "one.html"
    code, said, _ = bench(tmp_path, "report", str(run.root), "-o", str(page))
    assert code == 0 and "one server, compared with nothing" in page.read_text()


def test_a_url_alone_and_arms_servers_together_are_refused(tmp_path: Path) -> None:
    code, said, _ = bench(
        tmp_path, "validate", "regimes/cpu_default.yaml",
        "--endpoint", "http://127.0.0.1:1", "--endpoint", "ngram_k4=http://127.0.0.1:2",
    )  # fmt: skip
    assert code == 2 and "one server alone (no ARM=), or every arm's server" in said
