"""Arms that are existing servers (arms[].endpoint, bench run --endpoint ARM=URL), on the REAL CPU
engine: two vLLM servers started here, outside the harness, the way a deployment runs, then
measured by `bench run`. The harness never starts or stops them, names the model they serve, reads
tau from their metrics' counters, and says whether each window was alone on its server: a client
of its own keeps one of them busy, and that arm's caveat says so."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest
import yaml

from harness.config.engines import get_adapter
from harness.config.regime import load_regime
from harness.run.plan import model_reference
from harness.run.server import Server, free_port, group_alive

ROOT = Path(__file__).resolve().parent.parent
BENCH = [sys.executable, "-m", "harness.cli"]
E2E = ROOT / "tests" / "regimes" / "cpu_e2e.yaml"


@pytest.mark.parametrize(
    ("endpoints", "said"),
    [
        (
            {"baseline": "http://127.0.0.1:1"},
            "arms[1].endpoint: every arm is an existing server (endpoint) or none is",
        ),
        (
            {"baseline": "http://h:1/v1", "ngram_k4": "http://h:2"},
            "arms[0].endpoint: expected a server's base URL",
        ),
        ({"baseline": "ftp://h", "ngram_k4": "http://h:2"}, "expected a server's base URL"),
    ],
)
def test_an_endpoint_regime_is_checked_before_anything(endpoints: dict, said: str) -> None:
    from harness.core.errors import UserError
    from harness.core.overrides import flag_overrides

    given = [f"{arm}={url}" for arm, url in endpoints.items()]
    with pytest.raises(UserError, match=re.escape(said)):
        load_regime(E2E, flag_overrides(endpoints=given))


def test_an_endpoint_is_in_the_fingerprint_and_its_key_is_not() -> None:
    from harness.core.overrides import flag_overrides, parse_set

    one = load_regime(E2E, flag_overrides(endpoints=["baseline=http://a:1", "ngram_k4=http://a:2"]))
    other = load_regime(E2E, flag_overrides(endpoints=["baseline=http://a:1", "ngram_k4=http://b:2"]))
    keyed = load_regime(
        E2E,
        [
            *flag_overrides(endpoints=["baseline=http://a:1", "ngram_k4=http://b:2"]),
            parse_set("arms.baseline.api_key_env=KEY"),
        ],
    )
    assert len({load_regime(E2E).fingerprint(), one.fingerprint(), other.fingerprint()}) == 3
    assert keyed.fingerprint() == other.fingerprint()  # where the key is kept is not what runs


def test_the_caveats_say_what_an_endpoint_run_is_about() -> None:
    from harness.derive.verdict import endpoint_caveats
    from harness.present.verdict_text import caveat_text
    from harness.results.model import ArmSummary

    def arm(name: str, others: float | None) -> ArmSummary:
        return ArmSummary(
            name=name,
            method="ngram",
            num_speculative_tokens=4,
            drafter=None,
            status="ok",
            endpoint=f"http://{name}:1",
            others_tokens=others,
        )

    class Run:
        arms = [arm("baseline", 0.0), arm("busy", 120.0), arm("mute", None)]

    said = [caveat_text(c) for c in endpoint_caveats(Run())]  # type: ignore[arg-type]
    assert said[0].startswith("existing servers: every arm is a server the harness did not start")
    assert said[1] == (
        "busy: its server generated 120 output tokens for other clients during its windows: its "
        "timings and tau include another tenant's load"
    )
    assert said[2].startswith("mute: whether each window was alone on its server is unknown")
    assert len(said) == 3


def test_an_endpoint_that_does_not_answer_is_an_engine_failure_within_the_reach_timeout(
    tmp_path: Path, monkeypatch
) -> None:
    import time

    from harness.core.errors import EngineError
    from harness.run.server import ExternalServer

    monkeypatch.setattr("harness.run.server.REACH_TIMEOUT_S", 1.0)
    server = ExternalServer(f"http://user:secret-pw@127.0.0.1:{free_port()}", "/health", tmp_path / "log")
    started = time.monotonic()
    with server, pytest.raises(EngineError, match=r"not serving after 1 s \(ConnectError") as failed:
        server.wait_ready(600)  # a start-up's timeout: an existing server gets the reach timeout
    assert time.monotonic() - started < 10 and "secret-pw" not in str(failed.value)
    assert "not started or stopped by the harness" in (tmp_path / "log").read_text()
    assert "secret-pw" not in (tmp_path / "log").read_text()


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    """The e2e regime's baseline and ngram_k4 as two running servers on 127.0.0.1 ports (started
    together: one start-up's wait for both); their base URLs, and the regime file that measures them
    (one level, two rounds: an interval over windows)."""
    folder = tmp_path_factory.mktemp("deployment")
    data = yaml.safe_load((ROOT / "tests" / "regimes" / "cpu_e2e.yaml").read_text())
    data["workloads"] = [str(ROOT / "workloads" / "code_humaneval.yaml")]
    data["load"] = {**data["load"], "concurrency": [1], "server_starts": 2}
    data["load"].pop("ramp")
    regime_path = folder / "deployed.yaml"
    regime_path.write_text(yaml.safe_dump(data, sort_keys=False))
    regime = load_regime(regime_path)
    adapter = get_adapter("vllm")
    model = model_reference(regime, regime_path, convert=True)
    servers = {}
    for arm in regime.arms:
        port = free_port()
        spec = adapter.launch_spec(regime, arm, model, port, sys.executable)
        servers[arm.name] = Server(spec.argv, spec.env, port, folder / f"{arm.name}.log", adapter.health_path)
        servers[arm.name].start()
    try:
        for server in servers.values():
            server.wait_ready(600)
        yield regime_path, {name: f"http://127.0.0.1:{s.port}" for name, s in servers.items()}, servers
    finally:
        for server in servers.values():
            server.stop()


def _endpoints(urls: dict[str, str]) -> list[str]:
    return [arg for name, url in urls.items() for arg in ("--endpoint", f"{name}={url}")]


def _other_tenant(url: str, stop: threading.Event) -> None:
    """Another client of the ngram server: a short request after another until told to stop."""
    body = {"model": None, "prompt": "def add(a, b):", "max_tokens": 8, "temperature": 0}
    with httpx.Client(trust_env=False, timeout=60) as client:
        body["model"] = client.get(f"{url}/v1/models").json()["data"][0]["id"]
        while not stop.is_set():
            client.post(f"{url}/v1/completions", json=body)
            stop.wait(0.3)


@pytest.mark.engine
def test_existing_servers_are_measured_and_left_running(deployment, tmp_path: Path) -> None:
    regime_path, urls, servers = deployment
    stop = threading.Event()
    tenant = threading.Thread(target=_other_tenant, args=(urls["ngram_k4"], stop), daemon=True)
    tenant.start()
    try:
        out = subprocess.run(
            [
                *BENCH,
                "run",
                str(regime_path),
                "--results-dir",
                str(tmp_path),
                "--allow-mismatch",
                *_endpoints(urls),
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={**os.environ, "COLUMNS": "200"},
            timeout=900,
        )
    finally:
        stop.set()
        tenant.join(timeout=60)
    said = " ".join((out.stdout + out.stderr).split())
    assert out.returncode == 0, said[-3000:]
    assert all(group_alive(s.process.pid) for s in servers.values()), (
        "the harness stopped a server it did not start"
    )
    (run,) = tmp_path.glob("*/*")
    record = json.loads((run / "regime.json").read_text())
    assert [a["endpoint"] for a in record["regime"]["arms"]] == [urls["baseline"], urls["ngram_k4"]]
    # what each server said it serves, read before the run, is in the run's fingerprint
    served = record["served_endpoints"]
    assert served["baseline"]["model"] and served["ngram_k4"]["version"], served
    from harness.core.overrides import flag_overrides

    as_written = load_regime(regime_path, flag_overrides(endpoints=[f"{n}={u}" for n, u in urls.items()]))
    assert record["fingerprint"] != as_written.fingerprint()  # the same addresses, serving what they serve
    assert record["overrides"][0]["given"].startswith("--endpoint baseline=")
    for name in urls:
        launch = json.loads((run / "arms" / name / "launch.json").read_text())
        assert launch["endpoint"] == urls[name] and "argv" not in launch
        status = json.loads((run / "arms" / name / "status.json").read_text())
        assert status["status"] == "ok" and status.get("startups_s", []) == []  # reached, not started
    windows = {
        name: [json.loads(line) for line in (run / "arms" / name / "windows.jsonl").read_text().splitlines()]
        for name in urls
    }
    assert len(windows["ngram_k4"]) == 2  # two rounds: one window each
    # tau from the server's own counters, diffed around each window
    assert all(w["counters_after"]["drafts"] > w["counters_before"]["drafts"] for w in windows["ngram_k4"])
    assert all(w["cpu"] is None for ws in windows.values() for w in ws)  # not this machine's process
    # alone: the baseline's server generated nothing but the window's own tokens; the ngram server's
    # other client shows in every one of its windows
    assert all(w["others_tokens"] == 0 for w in windows["baseline"]), windows["baseline"]
    assert all(w["others_tokens"] > 0 for w in windows["ngram_k4"]), windows["ngram_k4"]
    assert "existing servers: every arm is a server the harness did not start" in said
    assert "ngram_k4: its server generated" in said and "baseline: its server generated" not in said


@pytest.mark.engine
def test_the_capacity_search_on_the_real_engine(deployment, tmp_path: Path) -> None:
    """bench capacity on the same two servers: each arm's probes, capacity and bracket, printed
    with the comparison when both were found. Rates and capacities are measured, never asserted."""
    regime_path, urls, _ = deployment
    out = subprocess.run(
        [
            *BENCH,
            "capacity",
            str(regime_path),
            "--results-dir",
            str(tmp_path),
            "--allow-mismatch",
            *_endpoints(urls),
            "--set",
            "slo.ttft_ms=1500",
            "--set",
            "slo.tpot_ms=100",
            "--set",
            "slo.target_pct=75",
            "--start-rate",
            "4",
            "--max-probes",
            "3",
            "--prompts-per-probe",
            "8",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "200"},
        timeout=900,
    )
    said = " ".join((out.stdout + out.stderr).split())
    assert out.returncode in (0, 3) and "Traceback" not in said, said[-3000:]
    (found,) = tmp_path.glob("*/capacity-*")
    record = json.loads((found / "capacity.json").read_text())
    assert record["slo"]["ttft_ms"] == 1500 and record["settings"]["max_probes"] == 3
    assert "twice the highest rate that held" in record["stop_rule"]
    for name in urls:
        probes = [
            json.loads(line) for line in (found / "arms" / name / "probes.jsonl").read_text().splitlines()
        ]
        assert 2 <= len(probes) <= 3 and probes[0]["rate_rps"] == 4.0 and all(p["sent"] == 8 for p in probes)
        held = []
        for probe in probes:  # the stop rule, as it ran
            assert not held or probe["rate_rps"] <= 2 * max(held) + 1e-9
            held += [probe["rate_rps"]] if probe["holds"] else []
        samples = (found / "arms" / name / "samples.jsonl").read_text().splitlines()
        assert len(samples) == 8 * len(probes)  # every request kept, warm-ups not
    assert "Capacity within TTFT 1500 ms / TPOT 100 ms at 75%" in said
    if "none found" not in said and "not reached" not in said:
        assert (
            "ngram_k4 serves" in said and "the baseline" in said and "between the searches' brackets" in said
        )


def test_an_endpoints_credentials_are_never_written_and_come_back_on_resume(tmp_path: Path) -> None:
    from harness.config.regime import stored_regime
    from harness.core.errors import UserError
    from harness.core.overrides import describe, flag_overrides, parse_set
    from harness.core.overrides import record as overrides_record

    given = flag_overrides(endpoints=["baseline=http://a:1", "ngram_k4=https://me:pw-planted@b:2"])
    given.append(parse_set("engine.env.HF_TOKEN=hf_plantedplantedplantedplanted1"))
    regime = load_regime(E2E, given)
    stored = regime.redacted().model_dump(mode="json")
    shown = json.dumps([stored, overrides_record(given), describe(given)])
    assert "pw-planted" not in shown and "hf_planted" not in shown, shown
    assert stored["arms"][1]["endpoint"] == "https://<redacted>@b:2"
    # a resume puts the credentials back from the regime file, or refuses naming the field
    data = yaml.safe_load(E2E.read_text().replace("../../workloads/", f"{ROOT}/workloads/"))
    for arm, url in zip(data["arms"], ["http://a:1", "https://me:pw-planted@b:2"], strict=True):
        arm["endpoint"] = url
    data["engine"]["env"]["HF_TOKEN"] = "hf_plantedplantedplantedplanted1"
    source = tmp_path / "deployed.yaml"
    source.write_text(yaml.safe_dump(data, sort_keys=False))
    assert stored_regime(stored, source).arms[1].endpoint == "https://me:pw-planted@b:2"
    data["arms"][1]["endpoint"] = "https://b:2"
    source.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(UserError, match=r"arms\[1\]\.endpoint: its credentials were not stored"):
        stored_regime(stored, source)


def test_one_server_one_fingerprint_whatever_its_password_or_slash() -> None:
    from harness.core.overrides import flag_overrides

    def fingerprint(baseline: str) -> str:
        return load_regime(
            E2E, flag_overrides(endpoints=[f"baseline={baseline}", "ngram_k4=http://h:2"])
        ).fingerprint()

    assert fingerprint("http://u:pw1@h:1") == fingerprint("http://u:pw2@h:1/") != fingerprint("http://h:9")
