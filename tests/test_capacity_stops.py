"""Issue 70, part 5: a capacity search that says why it stopped. Its stop rules compare Wilson
intervals, not point estimates; ``bench capacity`` names the rule that ended each arm's search, the
probes it used of its budget, and each probe's failed requests apart from its SLO misses; its rates
stay finite (a cap on the start and on doubling), so its files are JSON.

The whole command runs against a stand-in engine with no model: this file, run as a script, is an
OpenAI-format stream server that answers 3 of every 10 completions with HTTP 500 (benchmarks/
stream_server.py's streams for the others, each well within any SLO).
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

ROOT = Path(__file__).resolve().parent.parent
if __name__ != "__main__":  # as a test, not as the stand-in server
    from harness.derive.capacity import Step, Stop, arm_capacity, next_step, search_stop
    from harness.results.capacity import CapacityProbe, CapacityRecord, SearchSettings

    SETTINGS = SearchSettings(
        workload="w",
        start_rps=1.0,
        prompts_per_probe=6,
        max_probes=6,
        resolution=0.1,
        target_pct=90.0,
        min_rps=1 / 16,
        max_rps=1000.0,
    )


def _searched(served, settings, sent: int) -> list:
    """The probes the search sends to a server whose ``served(rate)`` of ``sent`` requests meet the SLO."""
    probes = []
    while isinstance(step := next_step(probes, settings), Step):
        met = served(step.rate_rps)
        probes.append(
            CapacityProbe(
                index=len(probes),
                rate_rps=step.rate_rps,
                sent=sent,
                met=met,
                failed=0,
                duration_s=1.0,
                holds=100 * met / sent >= settings.target_pct,
                phase=step.phase,
            )
        )
    return probes


def test_halving_within_the_noise_does_not_end_the_search() -> None:
    """The issue's case: 5/6 at 1 req/s and 5/6 at 0.5, each interval [44, 97] holding the 90%
    target. The search ended there ("halving did not raise attainment") and reported no rate within
    the SLO; both are compatible with it, so it halves on until its own limit."""
    probes = _searched(lambda rate: 5, SETTINGS, 6)
    assert len(probes) > 2, [p.rate_rps for p in probes]
    stop = search_stop(probes, SETTINGS)
    assert stop.rule == "min-rate" and min(p.rate_rps for p in probes) >= SETTINGS.min_rps
    # clearly below the target at the lower rate, and no better: missed without load, stopped at once
    settings = SETTINGS.model_copy(update={"prompts_per_probe": 20, "target_pct": 95.0})
    flat = _searched(lambda rate: 10, settings, 20)
    assert [p.rate_rps for p in flat] == [1.0, 0.5]
    assert search_stop(flat, settings).rule == "missed-without-load"
    # clearly below the target but rising as the load falls: halving goes on
    rising = _searched(lambda rate: min(19, int(10 + 1 / rate)), settings, 20)
    assert len(rising) > 2 and search_stop(rising, settings).rule != "missed-without-load"


def test_every_stop_is_named_and_counted() -> None:
    def holds_up_to(capacity: float):
        return lambda rate: 6 if rate <= capacity else 2

    resolved = _searched(holds_up_to(3.3), SETTINGS.model_copy(update={"max_probes": 12}), 6)
    assert search_stop(resolved, SETTINGS.model_copy(update={"max_probes": 12})).rule == "resolution"
    settings = SETTINGS.model_copy(update={"max_probes": 5})
    spent = _searched(holds_up_to(3.3), settings, 6)  # 1, 2, 4, 2.83, 3.36: 19% apart, not 10%
    assert len(spent) == 5 and search_stop(spent, settings) == Stop("max-probes")
    found = arm_capacity("a", spent, settings)
    assert found.stop == Stop("max-probes") and found.max_probes == 5
    assert search_stop([], settings).rule == "ended-early"  # an engine that failed before its first probe
    assert search_stop(spent[:3], settings).rule == "ended-early"  # ... or in the middle


def test_rates_stay_finite_and_doubling_is_capped() -> None:
    """A start of 1e308 req/s doubled to Infinity, written to probes.jsonl (not JSON). Doubling now
    stops at the cap (``max-rate``), a start above it is refused, and no stored record holds a
    number that is not finite."""
    settings = SETTINGS.model_copy(update={"start_rps": 300.0})
    probes = _searched(lambda rate: 6, settings, 6)
    assert [p.rate_rps for p in probes] == [300.0, 600.0, 1000.0]
    assert search_stop(probes, settings).rule == "max-rate"
    with pytest.raises(ValidationError, match="max_rps"):
        SearchSettings(**(SETTINGS.model_dump() | {"start_rps": 1e308}))
    for bad in (math.inf, math.nan):
        with pytest.raises(ValidationError):
            CapacityProbe(**(probes[0].model_dump() | {"rate_rps": bad}))
        with pytest.raises(ValidationError):
            SearchSettings(**(SETTINGS.model_dump() | {"max_rps": bad}))


def test_a_version_1_capacity_directory_still_reads() -> None:
    """Written before the cap and the failures' kinds: read as it is, without a cap."""
    record = {
        "schema_version": 1,
        "source_path": "x.yaml",
        "fingerprint": "f",
        "regime": {"arms": []},
        "overrides": [],
        "slo": {"ttft_ms": 500.0},
        "settings": {
            "workload": "w",
            "start_rps": 1.0,
            "prompts_per_probe": 6,
            "max_probes": 6,
            "resolution": 0.1,
            "target_pct": 90.0,
            "min_rps": 0.0625,
        },
        "stop_rule": "r",
    }
    old = CapacityRecord.model_validate(record)
    assert old.settings.max_rps is None
    line = {
        "index": 0,
        "rate_rps": 1.0,
        "sent": 6,
        "met": 5,
        "failed": 1,
        "duration_s": 1.0,
        "holds": False,
        "phase": "bracket",
    }
    probe = CapacityProbe.model_validate(line)
    assert probe.errors == {}
    assert next_step([probe], old.settings) == Step(0.5, "bracket")


def test_a_failed_request_is_counted_by_its_kind() -> None:
    from harness.run.capacity_search import error_kind

    errors = {
        "HTTP 500: boom": "HTTP 500",
        "timeout: not complete after 60 s": "timeout",
        "stalled: no token from any request for 30 s": "stalled",
        "ReadError: connection reset": "ReadError",
        "unreadable response (ValueError: bad)": "unreadable response",
        "stream ended without a finish_reason": "stream ended without a finish_reason",
    }
    assert {error: error_kind(error) for error in errors} == errors


# --- the whole command against the stand-in engine ---------------------------------------------


def _stand_in_regime(tmp_path: Path) -> Path:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    data = yaml.safe_load((ROOT / "tests" / "regimes" / "cpu_e2e.yaml").read_text())
    data["target"] = {"path": str(model), "dtype": "bfloat16", "max_model_len": 1024}
    data["workloads"] = [str(ROOT / "workloads" / "code_humaneval.yaml")]
    data["load"] |= {"concurrency": [1], "warmup_requests": 0}
    data["load"].pop("ramp", None)
    data["arms"] = [a for a in data["arms"] if a["method"] == "baseline"]
    data["slo"] = {"ttft_ms": 5000, "target_pct": 95}
    path = tmp_path / "stand_in.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _bench_capacity(monkeypatch, capsys, regime: Path, *flags: str) -> tuple[int, str]:
    from harness.cli import main
    from harness.config.engines import LaunchSpec
    from tests.test_run_plan import StandIn

    class Failing(StandIn):
        def launch_spec(self, regime, arm, model, port, python, draft_model=None) -> LaunchSpec:
            return LaunchSpec([python, __file__, "--port", str(port)])

    monkeypatch.setattr("harness.run.plan.get_adapter", lambda name: Failing())
    monkeypatch.setenv("COLUMNS", "200")
    code = main(["capacity", str(regime), "--allow-mismatch", *flags])
    captured = capsys.readouterr()
    return code, " ".join((captured.out + captured.err).split())


def test_bench_capacity_says_why_it_stopped_and_what_failed(tmp_path: Path, monkeypatch, capsys) -> None:
    """With 30% HTTP 500s no line said a request failed (they were counted as SLO misses) and the
    search ended after 2 of its probes without saying why."""
    regime = _stand_in_regime(tmp_path)
    results = tmp_path / "results"
    flags = (
        "--results-dir",
        str(results),
        "--start-rate",
        "4",
        "--max-probes",
        "6",
        "--prompts-per-probe",
        "10",
    )
    code, said = _bench_capacity(monkeypatch, capsys, regime, *flags)
    assert "Traceback" not in said and code == 3, said  # no rate held: no capacity
    # each probe: 7 of 10 within the SLO, 3 failed, none answered late
    assert said.count("7/10 within the SLO (3 failed, 0 missed a target)") == 2, said
    # 70% [40, 89]: clearly below 95% at half the rate, and no higher than at 4 req/s
    assert "baseline: stopped: missed-without-load after 2 of 6 probes" in said, said
    assert "baseline: 6 of 20 requests failed (HTTP 500: 6)" in said, said
    (found,) = results.glob("*/capacity-*")
    lines = (found / "arms" / "baseline" / "probes.jsonl").read_text().splitlines()
    probes = [json.loads(line) for line in lines]
    assert [(p["rate_rps"], p["met"], p["failed"], p["errors"]) for p in probes] == [
        (4.0, 7, 3, {"HTTP 500": 3}),
        (2.0, 7, 3, {"HTTP 500": 3}),
    ]
    record = json.loads((found / "capacity.json").read_text())
    assert record["schema_version"] == 2 and record["settings"]["max_rps"] == 1000.0


def test_bench_capacity_refuses_a_rate_past_its_cap(tmp_path: Path, monkeypatch, capsys) -> None:
    regime = _stand_in_regime(tmp_path)
    results = tmp_path / "results"
    for flags, message in (
        (("--start-rate", "1e308"), "--start-rate 1e+308 req/s is above --max-rate (1000 req/s)"),
        (("--start-rate", "20", "--max-rate", "10"), "--start-rate 20 req/s is above --max-rate (10 req/s)"),
        (("--max-rate", "inf"), "--max-rate must be a finite number > 0"),
        (("--max-rate", "1e9"), "--max-rate 1e+09 req/s: at most 1e+06"),
        (("--start-rate", "nan"), "--start-rate must be a finite number > 0"),
    ):
        code, said = _bench_capacity(monkeypatch, capsys, regime, "--results-dir", str(results), *flags)
        assert code == 2 and message in said and "Traceback" not in said, said
    assert not results.exists()  # refused before anything was written


# --- the stand-in server (this file as a script) -----------------------------------------------


class _FailingServer:
    """benchmarks/stream_server.py's streams, but completions 0, 1 and 2 of every 10 get HTTP 500."""

    def __init__(self) -> None:
        from stream_server import stream_bytes

        self.stream_bytes = stream_bytes
        self.completions = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
                path = head[0].split(" ")[1]
                length = next(
                    (int(h.split(":", 1)[1]) for h in head if h.lower().startswith("content-length:")), 0
                )
                request = json.loads(await reader.readexactly(length)) if length else {}
                if path.endswith("/completions"):
                    self.completions += 1
                    if (self.completions - 1) % 10 < 3:
                        writer.write(b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 4\r\n\r\nboom")
                        await writer.drain()
                        continue
                chat = path.endswith("/chat/completions")
                events = self.stream_bytes(chat, int(request.get("max_tokens", 16)), 2, 0)
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                    b"transfer-encoding: chunked\r\n\r\n"
                )
                for event in events:
                    writer.write(b"%x\r\n%s\r\n" % (len(event), event))
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionResetError, BrokenPipeError):
            pass
        finally:
            writer.close()


async def _serve(port: int) -> None:
    server = await asyncio.start_server(_FailingServer().handle, "127.0.0.1", port, backlog=1024)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "benchmarks"))
    asyncio.run(_serve(int(sys.argv[sys.argv.index("--port") + 1])))
