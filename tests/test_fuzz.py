"""The fuzz half of the chaos suite (issue 64; the stand-in engines are tests/test_chaos.py):
hypothesis mutates a real regime and a real run's JSONL lines in the ways files go wrong (a line
lost or doubled, a value replaced by another type, a huge number, NaN, a control character, an
alias, a tag, a line megabytes long). Each case ends in the model or in one ``UserError`` that names
the file (and its line), within a CPU-time and a memory limit of its own; anything else (a
traceback, a hang, a runaway allocation) fails the case, and hypothesis shrinks it to the smallest
text that does."""

from __future__ import annotations

import json
import re
import shutil
import time
import tracemalloc
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.config.regime import load_regime
from harness.core.errors import UserError
from harness.results.files import read_records
from harness.results.records import RequestRecord, WindowRecord

ROOT = Path(__file__).resolve().parent.parent
GOOD_LINES = (
    (ROOT / "regimes" / "cpu_smoke.yaml")
    .read_text()
    .replace("../workloads/", f"{ROOT}/workloads/")
    .splitlines()
)
RUN = ROOT / "tests" / "fixtures" / "run_v12_default"
SAMPLE = json.loads((RUN / "arms" / "ngram_k4" / "samples.jsonl").read_text().splitlines()[0])
WINDOW = json.loads((RUN / "arms" / "ngram_k4" / "windows.jsonl").read_text().splitlines()[0])
CPU_S = 1.0  # the bound: every malformed regime refused in under a second of CPU
PEAK_BYTES = 64 * 2**20
FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# what a value in a hand-edited or hostile file may be instead of the right one
HOSTILE_VALUES = st.sampled_from(
    [
        "",
        "~",
        "-1",
        "0",
        "1e400",
        "-.inf",
        ".nan",
        "NaN",
        "99999999999999999999999",
        "[]",
        "{}",
        "[1, [2, [3]]]",
        "{a: {b: {c: 1}}}",
        "'\x00'",
        '"\\x01\\x1b[31m"',
        "*undefined",
        "&a x",
        "!!python/object:os.system x",
        "!!binary AAAA",
        "yes",
        "2026-12-06",
        "'" + "x" * 100_000 + "'",
        "a" * 2_000_000,
        "[" * 100 + "]" * 100,
        "{",
        ": :",
        "- - -",
        "\t",
        "'unterminated",
        "é\u202e\ufeff",
    ]
)


@st.composite
def mutated_regime(draw) -> str:
    """The shipped smoke regime with up to four lines lost, doubled, re-indented or given a
    hostile value."""
    lines = list(GOOD_LINES)
    for _ in range(draw(st.integers(1, 4))):
        index = draw(st.integers(0, len(lines) - 1))
        action = draw(st.sampled_from(["drop", "double", "value", "indent", "insert"]))
        line = lines[index]
        if action == "drop":
            del lines[index]
        elif action == "double":
            lines.insert(index, line)
        elif action == "indent":
            lines[index] = " " * draw(st.integers(0, 7)) + line.lstrip()
        elif action == "insert":
            lines.insert(
                index, f"{draw(st.sampled_from(['x', 'arms', 'load', '- name']))}: {draw(HOSTILE_VALUES)}"
            )
        elif ":" in line:
            key = line.split(":", 1)[0]
            lines[index] = f"{key}: {draw(HOSTILE_VALUES)}"
        if not lines:
            lines = [""]
    return "\n".join(lines) + draw(st.sampled_from(["\n", "", "\n\n"]))


def _bounded(call) -> object:
    """``call()``'s result or its UserError, failing past the CPU time or memory allowed."""
    tracemalloc.start()
    started = time.process_time()
    try:
        return call()
    except UserError as exc:
        return exc
    finally:
        spent = time.process_time() - started
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert spent < CPU_S * 3, f"{spent:.2f} s of CPU (traced; untraced it must stay under {CPU_S} s)"
        assert peak < PEAK_BYTES, f"{peak / 2**20:.0f} MiB"


@given(text=mutated_regime())
@FUZZ
def test_a_mutated_regime_loads_or_is_refused_in_one_line(tmp_path: Path, text: str) -> None:
    path = tmp_path / "regime.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    outcome = _bounded(lambda: load_regime(path))
    if isinstance(outcome, UserError):
        message = str(outcome)
        assert message.startswith(f"{path}"), message
        assert len(message) < 4000, f"a {len(message):,}-character error"
        assert not re.search(r"unknown key '([^']*)'; did you mean '\1'", message), message
    # untraced, the time the issue bounds
    started = time.process_time()
    try:
        load_regime(path)
    except UserError:
        pass
    assert time.process_time() - started < CPU_S


JSON_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)


@st.composite
def mutated_line(draw, record: dict) -> str:
    """A real JSONL line with some fields replaced, dropped or added, or its text cut or spiked
    with a NaN, an infinity or bytes that are not JSON."""
    row = dict(record)
    for _ in range(draw(st.integers(1, 3))):
        key = draw(st.sampled_from(sorted(row) + ["unknown_field"]))
        if draw(st.booleans()):
            row[key] = draw(JSON_VALUES)
        else:
            row.pop(key, None)
    line = json.dumps(row)
    spoil = draw(st.sampled_from(["none", "nan", "inf", "cut", "bytes"]))
    if spoil == "nan":
        line = line.replace("null", "NaN", 1)
    elif spoil == "inf":
        line = line.replace("0.", 'Infinity, "x": 0.', 1)
    elif spoil == "cut":
        line = line[: draw(st.integers(0, len(line)))]
    elif spoil == "bytes":
        line = line[:40] + "\x00\x1b[31m\udcff" + line[40:]
    return line


@given(line=mutated_line(SAMPLE), window=mutated_line(WINDOW), torn=st.booleans())
@FUZZ
def test_a_mutated_run_line_is_read_or_named_with_its_line(
    tmp_path: Path, line: str, window: str, torn: bool
) -> None:
    for model, text, good in ((RequestRecord, line, SAMPLE), (WindowRecord, window, WINDOW)):
        path = tmp_path / "x.jsonl"
        body = json.dumps(good) + "\n" + text + ("" if torn else "\n") + json.dumps(good) + "\n"
        path.write_bytes(body.encode("utf-8", errors="surrogateescape"))
        outcome = _bounded(lambda: read_records(path, model))  # noqa: B023 (called at once)
        if isinstance(outcome, UserError):
            assert str(outcome).startswith(f"{path}:"), outcome
        else:
            assert len(outcome) in (2, 3)


@given(line=mutated_line(SAMPLE))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_every_view_of_a_run_with_a_mutated_line_answers_or_names_it(
    tmp_path: Path, line: str, capsys
) -> None:
    """bench show on the whole run: the views, not only the reader (exit 0, 2 or 3, never a traceback)."""
    from harness.cli import main

    run = tmp_path / "run"
    shutil.rmtree(run, ignore_errors=True)
    shutil.copytree(RUN, run)
    (run / "analysis.json").unlink(missing_ok=True)
    samples = run / "arms" / "ngram_k4" / "samples.jsonl"
    lines = samples.read_text().splitlines()
    lines[1] = line
    samples.write_bytes(("\n".join(lines) + "\n").encode("utf-8", errors="surrogateescape"))
    assert main(["show", str(run)]) in (0, 2, 3)
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err
