"""Every view works on every run (issue 64): a run where every arm failed at start-up (its arms'
status.json say failed, its sample files are empty) is shown, reported, exported and gated, each
saying what happened to each arm, never a traceback."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from harness.cli import main

ROOT = Path(__file__).resolve().parent.parent
ERROR = "server exited during start-up (exit 1): CUDA out of memory"
# what an engine's log may hold: a NUL, a control character, an ESC colour sequence
RAW = "boom\x00 \x01 \x1b[31mred\x1b[0m"


def _all_failed(tmp_path: Path) -> Path:
    run = tmp_path / "all_failed"
    shutil.copytree(ROOT / "tests" / "fixtures" / "run_v12_default", run)
    (run / "analysis.json").unlink(missing_ok=True)
    for arm in (run / "arms").iterdir():
        status = json.loads((arm / "status.json").read_text())
        (arm / "status.json").write_text(
            json.dumps({**status, "status": "failed", "phase": "startup", "error": ERROR})
        )
        for name in ("samples.jsonl", "windows.jsonl", "noise_floor.jsonl"):
            (arm / name).write_text("")
    return run


def test_a_run_where_every_arm_failed_has_every_view(tmp_path: Path, capsys) -> None:
    run = _all_failed(tmp_path)
    assert main(["show", str(run)]) == 3  # EXIT_ENGINE: the run's arms failed, as bench run said
    shown = " ".join(capsys.readouterr().out.split())
    assert f"arm ngram_k4 is failed: not in any verdict ({ERROR})" in shown
    page = tmp_path / "page.html"
    assert main(["report", str(run), "-o", str(page)]) == 0  # used to stop: "no lab table to show"
    html = page.read_text()
    assert "No arm measured anything in this run: there is no lab table" in html
    assert f"arm baseline is failed: not in any verdict ({ERROR})" in html
    assert main(["export", str(run), "-o", str(tmp_path / "export")]) == 0
    assert main(["gate", str(run)]) == 3  # its engines did not start: infrastructure, not a regression
    gated = " ".join(capsys.readouterr().out.split())
    assert f"infrastructure: the engine for ngram_k4 did not start: {ERROR}" in gated
    assert (run / "gate" / "junit.xml").is_file()


def test_an_engines_control_characters_reach_no_view_raw(tmp_path: Path, capsys) -> None:
    """An arm error holding NUL, \\x01 and ESC sequences (from an engine's log) is shown escaped by
    bench show and written escaped to the gate's Markdown and JUnit."""
    run = _all_failed(tmp_path)
    for arm in (run / "arms").iterdir():
        status = json.loads((arm / "status.json").read_text())
        (arm / "status.json").write_text(json.dumps({**status, "phase": "measuring", "error": RAW}))
    main(["show", str(run)])
    main(["gate", str(run)])
    out = capsys.readouterr()
    written = [
        out.out,
        out.err,
        (run / "gate" / "summary.md").read_text(),
        (run / "gate" / "junit.xml").read_text(),
    ]
    for text in written:
        assert "\x1b" not in text and "\x00" not in text and "\x01" not in text
    assert "boom\\x00 \\x01 \\x1b[31mred" in written[2]


@pytest.mark.parametrize(
    ("engine", "said"),
    [
        ({"env": {"A=B": "1"}}, "engine.env.A=B: not an environment variable name"),
        ({"env": {"A\0": "1"}}, "not an environment variable name"),
        ({"env": {"A": "x\0y"}}, "engine.env.A: a NUL character in the value"),
        ({"extra_args": ["--max-num-seqs", "4\0"]}, "engine.extra_args[1]: a NUL character"),
    ],
)
def test_what_no_process_can_be_given_is_refused_at_its_line(tmp_path: Path, capsys, engine, said) -> None:
    """NUL or '=' in engine.env, NUL in an argument: `bench validate` used to say valid and `bench
    run` crashed at the first start-up (leaving its socket directory behind)."""
    data = yaml.safe_load((ROOT / "regimes" / "cpu_default.yaml").read_text())
    data["engine"] |= engine
    data["workloads"] = [str(ROOT / "workloads" / "code_humaneval.yaml")]
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["validate", str(path)]) == 2
    out = capsys.readouterr()
    err = " ".join((out.out + out.err).split())
    assert f"{path}:" in err and said in err and "Traceback" not in err


def test_a_gzip_bomb_and_a_device_are_refused_with_bounded_memory(tmp_path: Path) -> None:
    """A prompt file that expands past the cap (here 257 MiB of zeros in a 1.1 MiB .jsonl.gz) is
    refused once the cap is read, not decompressed whole; a link to /dev/zero is no prompt file."""
    import gzip
    import tracemalloc

    from harness.config.workloads import MAX_PROMPT_FILE_BYTES, _read_text
    from harness.core.errors import UserError

    bomb = tmp_path / "prompts.jsonl.gz"
    with gzip.open(bomb, "wb", compresslevel=1) as handle:
        for _ in range(MAX_PROMPT_FILE_BYTES // 2**20 + 1):
            handle.write(bytes(2**20))
    assert bomb.stat().st_size < 2 * 2**20
    tracemalloc.start()
    try:
        with pytest.raises(UserError, match="over 256 MiB of prompts once decompressed"):
            _read_text(bomb)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * MAX_PROMPT_FILE_BYTES  # the cap read once (it used to be the whole expansion)
    device = tmp_path / "zero.jsonl"
    device.symlink_to("/dev/zero")
    with pytest.raises(UserError, match="not a regular file"):
        _read_text(device)


@pytest.mark.parametrize("command", ["show", "report", "export", "gate"])
def test_a_run_file_that_is_a_device_is_named_not_read(tmp_path: Path, capsys, command: str) -> None:
    """samples.jsonl a link to /dev/zero: each view names the file (it used to read until a
    MemoryError)."""
    run = tmp_path / "run"
    shutil.copytree(ROOT / "tests" / "fixtures" / "run_v12_default", run)
    (run / "analysis.json").unlink(missing_ok=True)
    samples = run / "arms" / "ngram_k4" / "samples.jsonl"
    samples.unlink()
    samples.symlink_to("/dev/zero")
    args = [command, str(run)] + (["-o", str(tmp_path / "out")] if command in ("report", "export") else [])
    assert main(args) == 2
    out = capsys.readouterr()
    assert f"{samples}: not a regular file" in " ".join((out.out + out.err).split())


def test_what_bench_run_refuses_as_lossy_bench_validate_refuses_at_its_line(tmp_path: Path, capsys) -> None:
    """rejection_sample_method fly (vLLM 0.34) used to pass bench validate with a notice and no
    line, and an SGLang accept threshold of "nan" was not flagged at all (nan < 1 is false)."""
    for source, arm, options, said in [
        (
            ROOT / "regimes" / "h200_tp8_deepseek_mtp.yaml",
            3,
            {"rejection_sample_method": "fly"},
            "'fly' is a lossy",
        ),
        (
            ROOT / "regimes" / "h200_tp1_qwen3_8b_sglang.yaml",
            1,
            {"speculative_accept_threshold_single": "nan"},
            "nan < 1 accepts drafts the target would reject",
        ),
    ]:
        data = yaml.safe_load(source.read_text())
        data["workloads"] = [str((source.parent / w).resolve()) for w in data["workloads"]]
        data["arms"][arm]["options"] = {**data["arms"][arm].get("options", {}), **options}
        path = tmp_path / source.name
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        assert main(["validate", str(path)]) == 2
        out = capsys.readouterr()
        shown = " ".join((out.out + out.err).split())
        assert f"{path}:" in shown and f"arms[{arm}].options.{next(iter(options))}" in shown and said in shown


def test_a_nan_in_a_run_file_is_named_not_shown(tmp_path: Path, capsys) -> None:
    """t_done: NaN in samples.jsonl used to be accepted (show printed nan; history add failed on a
    NOT NULL constraint with a traceback): the line is named as corrupt."""
    run = tmp_path / "run"
    shutil.copytree(ROOT / "tests" / "fixtures" / "run_v12_default", run)
    (run / "analysis.json").unlink(missing_ok=True)
    samples = run / "arms" / "ngram_k4" / "samples.jsonl"
    lines = samples.read_text().splitlines()
    row = json.loads(lines[2])
    lines[2] = json.dumps({**row, "t_done": float("nan")})
    samples.write_text("\n".join(lines) + "\n")
    assert main(["show", str(run)]) == 2
    out = capsys.readouterr()
    assert f"{samples}:3: not valid JSON (NaN is not a number this harness writes)" in " ".join(
        (out.out + out.err).split()
    )


@pytest.mark.parametrize("fmt", ["csv", "parquet", "jsonl"])
def test_export_never_writes_through_a_link(tmp_path: Path, fmt: str) -> None:
    """A link placed at DIR/cells.<fmt> (to a file of someone else's) is removed by the export's
    --force (a used folder is refused without it), never written through or followed."""
    out = tmp_path / "export"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (out / f"cells.{fmt}").symlink_to(victim)
    assert (
        main(
            ["export", str(ROOT / "tests" / "fixtures" / "run_v12_default"), "-o", str(out), "--format", fmt]
            + ["--force"]
        )
        == 0
    )
    assert victim.read_text() == "keep me"
    assert (out / f"cells.{fmt}").is_file() and not (out / f"cells.{fmt}").is_symlink()
    assert not list(out.glob(".*.tmp-*"))  # no temporary file left


def test_a_finished_arms_missing_or_empty_samples_are_said(tmp_path: Path, capsys) -> None:
    """A deleted or emptied samples.jsonl of an arm that finished showed as 0/0 with nothing said:
    every view now says which file is missing or empty (the terminal, the report's caveats)."""
    run = tmp_path / "run"
    shutil.copytree(ROOT / "tests" / "fixtures" / "run_v3_smoke", run)
    (run / "analysis.json").unlink(missing_ok=True)
    emptied = run / "arms" / "ngram_k4" / "samples.jsonl"
    emptied.write_text("")
    deleted = run / "arms" / "self_draft_k3" / "windows.jsonl"
    deleted.unlink()
    assert main(["show", str(run)]) in (0, 3)
    shown = " ".join(capsys.readouterr().out.split())
    assert f"{emptied}: empty, though its arm finished: its requests are in no figure" in shown
    assert f"{deleted}: missing, though its arm finished" in shown
    report = tmp_path / "report.html"
    assert main(["report", str(run), "-o", str(report)]) == 0
    assert "ngram_k4/samples.jsonl: empty, though its arm finished" in report.read_text()
