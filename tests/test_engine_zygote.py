"""The tests' engine zygote (tests/engine_site/zygote.py) forks a server only where a freshly
started one would be the same process: what it refuses, without an engine (the end-to-end test
checks a forked server's answers against a fresh one's)."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from tests.engine_site import zygote
from tests.engine_site.zygote import IN_A_JOB, SERVER, ZYGOTE_ENV, env_difference, fork_server


def test_only_what_no_import_reads_may_differ() -> None:
    mine = {"PATH": "/bin", "OMP_NUM_THREADS": "1", "HF_ENDPOINT": "https://huggingface.co"}
    noise = {"PYTEST_CURRENT_TEST": "t", "BENCH_X": "1", "HF_TOKEN": "s", "TMPDIR": "/var/tmp"}
    theirs = {**mine, **noise, "CUDA_VISIBLE_DEVICES": "2,3", ZYGOTE_ENV: "/tmp/z.sock"}
    assert env_difference(mine, theirs) == []
    read_at_import = {"OMP_NUM_THREADS": "2", "HF_ENDPOINT": "https://x.invalid", "PYTHONPATH": "/patch"}
    assert env_difference(mine, {**theirs, **read_at_import}) == sorted(read_at_import)
    assert env_difference(mine, {"OMP_NUM_THREADS": "1", "HF_ENDPOINT": "https://huggingface.co"}) == ["PATH"]
    # a Slurm job's variables are no noise: its servers come from a zygote inside the job
    assert env_difference(mine, {**mine, "SLURM_JOB_ID": "7", "SUBMITIT_FOLDER": "/f"}) == [
        "SLURM_JOB_ID",
        "SUBMITIT_FOLDER",
    ]


def test_a_slurm_jobs_server_and_other_commands_never_ask_the_sessions(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "zygote.sock"
    asked = []  # a Slurm job's server asks its bench process's own zygote (here: none there)
    monkeypatch.setattr(
        zygote, "job_zygote", lambda env: asked.append(env[IN_A_JOB]) or str(tmp_path / "no.sock")
    )
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(path))
        listener.listen(1)
        listener.setblocking(False)
        server = [sys.executable, "-m", SERVER, "--port", "8000"]
        assert fork_server(server, {ZYGOTE_ENV: str(path), IN_A_JOB: "42"}, 0, 1, 2) is None
        assert asked == ["42"]
        assert fork_server([sys.executable, "-m", "http.server"], {ZYGOTE_ENV: str(path)}, 0, 1, 2) is None
        assert fork_server(server, {ZYGOTE_ENV: "0"}, 0, 1, 2) is None
        with pytest.raises(BlockingIOError):  # nobody connected to the session's zygote
            listener.accept()
