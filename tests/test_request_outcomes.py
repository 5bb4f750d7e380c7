"""A request either finished or failed (issue 79, items 3, 4 and 8): only finish_reason "stop" and
"length" finish one; an abort, an error event, more tokens than max_tokens or output text without
token ids is a failed request with its reason, counted as one, and a window where too many failed is
not summed. The stand-in is tests/hostile_server.py (a process of its own on the loopback)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import yaml

from harness.config.arms import Arm
from harness.config.engines import get_adapter
from harness.config.load import Load, Sampling
from harness.config.workloads import LoadedWorkload, Prompt, Workload
from harness.core.probes.acceptance import SpecCounters
from harness.derive.summary import MAX_FAILED_SHARE, _others_tokens, cell_metrics
from harness.derive.verdict import failed_requests
from harness.present.verdict_text import caveat_text
from harness.results.records import RequestRecord, WindowRecord
from harness.run.client import run_window
from tests.conftest import local_server

ROOT = Path(__file__).resolve().parent.parent
HOSTILE = ROOT / "tests" / "hostile_server.py"
MAX_TOKENS = 4


@pytest.fixture(scope="module")
def hostile_server() -> str:
    with local_server(HOSTILE) as url:
        yield url


def _answers(url: str, modes: list[str]) -> dict[str, RequestRecord]:
    """One request per mode (the hostile server answers by prompt), with vLLM's fields asking for ids."""
    source = {"path": "x.jsonl", "format": "jsonl"}
    definition = Workload.model_validate(
        {"name": "w", "category": "c", "prompt_format": "raw", "source": source}
    )
    prompts = [Prompt(f"p{i}-{mode}", mode) for i, mode in enumerate(modes)]
    workload = LoadedWorkload(definition, prompts, "sha")
    load = Load(concurrency=[2], num_prompts=len(prompts), max_output_tokens=MAX_TOKENS, request_timeout_s=60)
    fields = get_adapter("vllm").request_fields("raw", 0)
    result = asyncio.run(
        run_window(url, workload, prompts, 2, Sampling(temperature=0), load, engine_fields=fields)
    )
    return {record.prompt_id.split("-", 1)[1]: record for record in result.records}


def test_item3_more_tokens_than_max_tokens_is_a_failed_request(hostile_server: str) -> None:
    """64 tokens for max_tokens 4 (under the client's memory guard of 2 x 4 + 64) were an answer:
    counted, its speed the overrun's. Exactly max_tokens is an answer."""
    answers = _answers(hostile_server, ["good", "overrun"])
    assert answers["good"].ok and len(answers["good"].token_ids) == MAX_TOKENS, answers["good"].error
    assert answers["overrun"].error == "over max_tokens: 64 tokens for max_tokens 4"


def test_item4_an_abort_or_an_error_event_is_a_failed_request(hostile_server: str) -> None:
    """finish_reason "abort" after 2 tokens was a finished request (its 2 tokens counted); an error
    event mid-stream was "stream ended without a finish_reason", not what the server said."""
    answers = _answers(hostile_server, ["abort", "error-event", "good"])
    assert answers["abort"].error == "finish_reason 'abort'"
    assert answers["error-event"].error.startswith("error event: ")
    assert "engine core died" in answers["error-event"].error
    assert answers["good"].ok


def test_item8_output_without_token_ids_fails_and_is_never_another_clients(hostile_server: str) -> None:
    """Text streamed without token ids counted 0 tokens: the request was "ok" with nothing measured,
    and an endpoint's generated-token counter put the window's own tokens on other clients."""
    answers = _answers(hostile_server, ["no-ids"])
    record = answers["no-ids"]
    assert record.error is not None and record.error.startswith("output without token ids: ")
    window = WindowRecord(
        workload="w", category="c", prompt_format="raw", concurrency=2, duration_s=1.0, others_tokens=4.0
    )  # the run side's count: the server's 4 generated tokens, none of them the window's by ids
    record.usage_completion_tokens = 4  # the engine's own count (the stand-in sends it)
    assert _others_tokens([window], [record]) == 0.0
    record.usage_completion_tokens = None  # no count at all: nobody can tell, nobody is blamed
    assert _others_tokens([window], [record]) is None


def _record(repeat: int, error: str | None) -> RequestRecord:
    return RequestRecord(
        "w", "p", 1, "raw", repeat, t_send=0.0, t_first_token=0.1, t_done=1.0, token_ids=[1, 2], error=error
    )


def test_a_window_with_too_many_failed_requests_is_not_summed_and_the_caveat_says_so() -> None:
    """Two windows of 10 requests, the second with 2 aborted (20% > 10%): its 8 answers over its
    whole time entered the cell's tok/s and its start-up's speedup."""
    windows = [
        WindowRecord(
            workload="w",
            category="c",
            prompt_format="raw",
            concurrency=1,
            repeat=repeat,
            server_start=repeat,
            duration_s=10.0,
            counters_before=SpecCounters().to_json(),
            counters_after=SpecCounters().to_json(),
        )
        for repeat in (0, 1)
    ]
    records = [_record(0, None) for _ in range(10)]
    records += [_record(1, None) for _ in range(8)] + [_record(1, "finish_reason 'abort'") for _ in range(2)]
    assert MAX_FAILED_SHARE < 0.2
    arm = Arm(name="ng", method="ngram", num_speculative_tokens=4)
    cell = cell_metrics(arm, None, windows, records, 1.0, None, engine="vllm")
    assert (cell.requests_total, cell.requests_ok, cell.requests_errored) == (20, 18, 2)
    assert cell.repeats == 2 and [r.repeat for r in cell.per_repeat] == [0]
    assert cell.output_tokens == 20 and cell.duration_s == 10.0 and cell.output_tok_s == 2.0
    assert cell.startup_tok_s() == {0: 2.0}  # the second start-up is no sample of the speedup

    class Run:
        arms = [arm]

        @staticmethod
        def cells_of(name: str) -> list:
            return [cell]

    (said,) = [caveat_text(c) for c in failed_requests(Run())]  # type: ignore[arg-type]
    # why they failed, by kind, in every view that renders the caveat
    assert cell.requests_failed_by == {"finish_reason 'abort'": 2}
    assert said.startswith(
        "arm ng: 2 of 20 requests failed (w @1: 2 (2 finish_reason 'abort'), 1 of 2 windows left out)"
    ), said
    assert "no window where more than 10% of the requests failed" in said


def test_bench_run_names_the_abort_in_the_terminal(tmp_path: Path, monkeypatch, capsys) -> None:
    """A whole run with an arm whose server aborts every request after 2 tokens: it printed ngram
    0.67x, every request "ok"; the arm now fails, its reason in the caveat."""
    from harness.cli import main
    from harness.config.engines import LaunchSpec
    from tests.test_run_plan import StandIn, stand_in_regime

    class Aborting(StandIn):
        def launch_spec(self, regime, arm, model, port, python, draft_model=None) -> LaunchSpec:
            if arm.name != "ngram_k4":
                return super().launch_spec(regime, arm, model, port, python, draft_model)
            return LaunchSpec([python, str(HOSTILE), "--port", str(port), "--every", "abort"])

    data = stand_in_regime(tmp_path)
    data["load"]["num_prompts"] = 4
    data["arms"] = [a for a in data["arms"] if a["name"] in ("baseline", "ngram_k4")]
    regime = tmp_path / "abort.yaml"
    regime.write_text(yaml.safe_dump(data, sort_keys=False))
    monkeypatch.setattr("harness.run.plan.get_adapter", lambda name: Aborting())
    monkeypatch.setenv("COLUMNS", "200")
    code = main(["run", str(regime), "--results-dir", str(tmp_path / "results"), "--allow-mismatch"])
    captured = capsys.readouterr()
    said = " ".join((captured.out + captured.err).split())
    assert "Traceback" not in said and code == 3, said[-3000:]
    assert "arm ngram_k4 is failed" in said and "finish_reason 'abort'" in said, said[-3000:]


def test_a_stored_abort_without_an_error_is_a_failed_request() -> None:
    """A record stored before the client refused other finish reasons (no error, finish_reason
    "abort") is read as failed too, and one stored before finish reasons were kept (None) as finished."""
    from harness.results.records import RequestRecord

    stored = RequestRecord(
        workload="w", prompt_id="p", concurrency=1, prompt_format="raw", finish_reason="abort"
    )
    assert not stored.ok and stored.failure == "finish_reason 'abort'"
    assert RequestRecord(workload="w", prompt_id="p", concurrency=1, prompt_format="raw").ok
