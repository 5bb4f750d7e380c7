"""The counters a speculative arm's numbers come from are its own server's, for the model it serves
(issue 79, items 6 and 7): a server whose /metrics also count another model is read for the served
model's label only, the other named; a speculative arm whose server never drafted fails "this server
does not speculate" instead of showing tau "-" without a word."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.config.arms import Arm
from harness.config.engines import get_adapter
from harness.core.probes.acceptance import acceptance, served_samples
from harness.results import RequestRecord, WindowRecord, read_records
from harness.run import engine_http as http
from harness.run.window import never_drafted
from tests.test_endpoint_trust import TAU, run_on, stand_in

ROOT = Path(__file__).resolve().parent.parent
# a real vLLM CPU server's /metrics (0.32.0, ngram), serving "target"
METRICS = (ROOT / "tests" / "fixtures" / "vllm_cpu_0.32.0_ngram_metrics.txt").read_text()
RUN = ROOT / "tests" / "fixtures" / "run_v14_default" / "arms"
SERVED_LABEL = 'model_name="target"'
NGRAM = Arm.model_validate(
    {"name": "ngram_k4", "method": "ngram", "num_speculative_tokens": 4, "endpoint": "http://gpu-node-4:8000"}
)


def another_model(text: str, model: str = "model-B") -> str:
    """``text`` with a second model's samples beside each of the served one's: counts of 10 times
    as many drafts, each accepting more (another tau)."""

    def relabelled(line: str) -> str:
        name, value = line.rsplit(" ", 1)
        scale = 10.0 if "drafts" in name or "draft_tokens" in name else 25.0
        other = 'model_name="' + model + '"'
        return f"{name.replace(SERVED_LABEL, other)} {float(value) * scale}"

    served = [line for line in text.splitlines() if SERVED_LABEL in line and line[0] != "#"]
    return text + "\n".join(relabelled(line) for line in served) + "\n"


def test_another_models_samples_are_left_out_and_named() -> None:
    adapter = get_adapter("vllm")
    both = another_model(METRICS)
    kept, others = served_samples(both, "target")
    assert others == ["model-B"]
    assert adapter.parse_spec_counters(kept) == adapter.parse_spec_counters(METRICS)
    summed = acceptance(adapter.parse_spec_counters(both)).tau
    assert summed != pytest.approx(acceptance(adapter.parse_spec_counters(METRICS)).tau)  # what was shown
    # a label written with the exposition's escapes is the name it spells
    kept, others = served_samples('a{model_name="t\\"x"} 1\nb{model_name="t"} 2\nc 3\n', 't"x')
    assert kept == 'a{model_name="t\\"x"} 1\nc 3\n' and others == ["t"]


def test_the_run_side_reads_only_the_served_models_counters(monkeypatch: pytest.MonkeyPatch) -> None:
    """Scraped as a window does (the adapter's counters, the generated-token total): the served
    model's values alone, and the other model named once."""
    url = "http://127.0.0.1:1"
    both = another_model(METRICS)
    monkeypatch.setattr(http, "_get", lambda base_url, path, timeout: (200, both.encode()))
    http.register_served_model(url, "target")
    adapter = get_adapter("vllm")
    assert adapter.read_spec_counters(url) == adapter.parse_spec_counters(METRICS)
    generated = re.search(r'^vllm:generation_tokens_total\{[^}]*"target"\} (\S+)$', METRICS, re.M)
    assert generated is not None
    assert http.read_total(url, "/metrics", adapter.generation_counter) == float(generated[1])
    # the prefix cache's counts too: the window's hit rate is the served model's
    assert adapter.read_prefix_cache(url) == adapter.parse_prefix_cache(METRICS) is not None
    assert adapter.parse_prefix_cache(both) != adapter.parse_prefix_cache(METRICS)
    assert http.other_models(url, unsaid=True) == ["model-B"]
    assert http.other_models(url, unsaid=True) == [] and http.other_models(url) == ["model-B"]


def _arm_files(arm: str) -> tuple[list[WindowRecord], list[RequestRecord]]:
    return read_records(RUN / arm / "windows.jsonl", WindowRecord), read_records(
        RUN / arm / "samples.jsonl", RequestRecord
    )


def test_a_speculative_arm_without_one_draft_is_no_speculative_arm() -> None:
    adapter = get_adapter("vllm")
    windows, records = _arm_files("ngram_k4")
    assert never_drafted(adapter, NGRAM, windows, records, []) is None
    # every window's counters as they were before it: a server that never drafted (or has none)
    still = [w.model_copy(update={"counters_after": w.counters_before}) for w in windows]
    why = never_drafted(adapter, NGRAM, still, records, ["model-B"]) or ""
    assert why.startswith("this server does not speculate: not one draft in arm ngram_k4's")
    assert "yet it is method: ngram" in why and "its /metrics count drafts for 'model-B'" in why
    # one window that drafted is enough: ngram drafts only where it finds a match
    assert never_drafted(adapter, NGRAM, [*still[1:], windows[0]], records, []) is None
    baseline = Arm.model_validate({"name": "baseline", "method": "baseline", "endpoint": "http://gpu-node-3"})
    assert never_drafted(adapter, baseline, *_arm_files("baseline"), []) is None
    # a server the harness started runs the config it was given (its log says so: check_served)
    started = NGRAM.model_copy(update={"endpoint": None})
    assert never_drafted(adapter, started, still, records, []) is None


def test_an_ngram_arm_on_a_server_that_does_not_speculate_fails_saying_so(tmp_path: Path) -> None:
    """Both servers plain vLLM stand-ins, the ngram arm's without a speculative config (no
    spec-decode counters at all, as vLLM): the arm fails with the reason, the run exits non-zero."""
    with (
        stand_in(tmp_path, "baseline", speculates=False) as base,
        stand_in(tmp_path, "ngram", speculates=False) as ngram,
    ):
        code, said, run = run_on(tmp_path, {"baseline": base, "ngram_k4": ngram}, server_starts=1)
    assert run is not None and code != 0, said[-3000:]
    status = run.read_status("ngram_k4")
    assert status.status == "failed" and "this server does not speculate" in (status.error or ""), status
    assert "arm ngram_k4 failed" in said and run.read_status("baseline").status == "ok"


def test_another_model_counted_on_the_metrics_is_named_in_every_view(tmp_path: Path) -> None:
    """The windows say which other models their server's /metrics counted (``other_models``); the
    summary and the run's caveats name them, so a stored run says it, not only the live terminal."""
    import json
    import shutil

    from harness.derive.summary import summarize
    from harness.derive.verdict import run_caveats
    from harness.present.verdict_text import caveat_text

    run = tmp_path / "run"
    shutil.copytree(Path(__file__).parent / "fixtures" / "run_v12_default", run)
    windows = run / "arms" / "ngram_k4" / "windows.jsonl"
    lines = [json.loads(line) for line in windows.read_text().splitlines()]
    windows.write_text("".join(json.dumps({**w, "other_models": ["model-B\x1b[2J"]}) + "\n" for w in lines))
    summary = summarize(run)
    assert summary.arm("ngram_k4").metrics_other_models == ["model-B\x1b[2J"]
    said = [caveat_text(c) for c in run_caveats(summary) if c.code == "metrics_other_models"]
    assert said == [
        "ngram_k4: its server's /metrics also count the model(s) 'model-B\\x1b[2J' (label model_name): "
        "left out, only the served model's counters are read"
    ]


def test_a_run_on_a_server_that_counts_another_model_reads_only_its_own(tmp_path: Path) -> None:
    """The ngram server's /metrics also count model-B (the stand-in's ``STAND_IN_OTHER_MODEL``),
    with another tau: the run's tau is the served model's alone, and the stored run names model-B."""
    import json

    with (
        stand_in(tmp_path, "baseline", speculates=False) as base,
        stand_in(tmp_path, "ngram", speculates=True, STAND_IN_OTHER_MODEL="model-B") as ngram,
    ):
        code, said, run = run_on(tmp_path, {"baseline": base, "ngram_k4": ngram}, server_starts=1)
    assert run is not None and "model-B" in said, said[-3000:]
    summary = json.loads((run.root / "summary.json").read_text())
    (cell,) = [c for c in summary["cells"] if c["arm"] == "ngram_k4"]
    assert cell["tau"] == pytest.approx(TAU)
    (arm,) = [a for a in summary["arms"] if a["name"] == "ngram_k4"]
    assert arm["metrics_other_models"] == ["model-B"]
    assert all(w.other_models == ["model-B"] for w in read_records(run.windows("ngram_k4"), WindowRecord))
