"""``bench run REGIME --endpoint URL``: one running server, measured as the regime's baseline arm
alone and compared with nothing (issue 73, item 4): no speedup and no verdict, each window's tok/s
with its 95% interval over the rounds; the report renders; a URL alone beside ARM=URL is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.results import read_json
from tests.test_endpoint_trust import _regime, bench, stand_in

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


LOOPBACK_SPELLINGS = [
    "http://localhost:8000",
    "http://LOCALHOST:8000",
    "http://127.1:8000",
    "http://0x7f000001:8000",
    "http://2130706433:8000",
    "http://[::1]:8000",
    "https://127.0.0.2:8000",
]


@pytest.mark.parametrize("spelling", LOOPBACK_SPELLINGS)
def test_every_spelling_of_this_machine_is_one_server(tmp_path: Path, spelling: str) -> None:
    """127.0.0.1 and its other spellings (a name, a case, IPv4's short and numeric forms, IPv6's
    loopback, another address of 127/8) are one server on one port: two arms on it are refused as
    one server, however the second is written (issue 79, item 6)."""
    from harness.config.arms import endpoint_address
    from harness.config.regime import load_regime
    from harness.core.errors import UserError
    from harness.core.overrides import flag_overrides

    assert endpoint_address(spelling) == endpoint_address("http://127.0.0.1:8000")
    same = flag_overrides(endpoints=["baseline=http://127.0.0.1:8000", f"ngram_k4={spelling}"])
    with pytest.raises(UserError, match=r"arms\[1\]\.endpoint: the same server as arms\[0\] \(baseline\)"):
        load_regime(_regime(tmp_path), same)


def test_other_ports_and_hosts_are_other_servers(tmp_path: Path) -> None:
    """Another port of this machine, or another machine, is another server; a name is compared as
    written, its case aside (validation asks no resolver)."""
    from harness.config.arms import endpoint_address
    from harness.config.regime import load_regime
    from harness.core.overrides import flag_overrides

    assert endpoint_address("http://127.0.0.1:8000") != endpoint_address("http://127.0.0.1:8001")
    assert endpoint_address("http://10.0.0.1:80") == endpoint_address("http://10.0.0.1") != "loopback:80"
    assert endpoint_address("http://Gpu-Node-3:80") == endpoint_address("http://gpu-node-3")
    assert endpoint_address("http://gpu-node-3") != endpoint_address("http://gpu-node-4")
    assert endpoint_address("http://10.1.2:80") == endpoint_address("http://10.1.0.2")  # inet_aton's form
    two = flag_overrides(endpoints=["baseline=http://gpu-node-3:8000", "ngram_k4=http://gpu-node-4:8000"])
    assert load_regime(_regime(tmp_path), two).arms[1].endpoint == "http://gpu-node-4:8000"
