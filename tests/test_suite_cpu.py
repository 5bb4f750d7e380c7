"""benchmarks/suite_cpu.py's attribution of processes to kinds and test modules (pure parts)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import suite_cpu  # noqa: E402


def test_each_kind_of_process_the_suite_starts() -> None:
    python = "/repo/.venv/bin/python"
    server = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", "m"]
    assert suite_cpu.kind_of(server, "python") == "vllm API server"
    assert suite_cpu.kind_of(server, "VLLM::EngineCore") == "vllm engine core"  # forked, renamed
    spawned = [python, "-c", "from multiprocessing.spawn import spawn_main; spawn_main()", "vllm"]
    assert suite_cpu.kind_of(spawned, "python") == "vllm engine core"
    stage = [python, "-m", "harness.run.drafters.train_stages", "train", "/tmp/w"]
    assert suite_cpu.kind_of(stage, "python") == "drafter torch stage"
    assert suite_cpu.kind_of([python, "-m", "harness.cli", "run", "r.yaml"], "python") == "bench command"
    assert suite_cpu.kind_of([python, "-m", "pytest", "-n", "2"], "python").startswith("pytest")
    worker = [python, "-c", "import sys;exec(eval(sys.stdin.readline()))"]  # an xdist worker (execnet)
    assert suite_cpu.kind_of(worker, "python").startswith("pytest")
    assert suite_cpu.kind_of(["/usr/sbin/slurmd", "-D"], "slurmd") == "other"
    zygote = [python, "-m", "zygote", "/tmp/z/zygote.sock"]  # tests/engine_site/zygote.py, by module
    assert suite_cpu.kind_of([*zygote, "vllm.entrypoints.openai.api_server", "#"], "python").startswith(
        "vllm zygote"
    )
    assert suite_cpu.kind_of([*zygote, "harness.run.drafters.train_stages", "#"], "python").startswith(
        "stage zygote"
    )


def test_a_process_without_its_test_takes_its_ancestors() -> None:
    environ = {"PYTEST_CURRENT_TEST": "tests/test_end_to_end.py::test_run_stores_raw_samples_per_arm (setup)"}
    assert suite_cpu.module_of(environ) == "test_end_to_end.py"
    assert suite_cpu.module_of({}) is None
    seen = {
        (1, 0.0): suite_cpu.Seen("bench command", "test_end_to_end.py", 2.0, None),
        (2, 1.0): suite_cpu.Seen("vllm API server", "test_end_to_end.py", 14.0, (1, 0.0)),
        (3, 2.0): suite_cpu.Seen("vllm engine core", None, 20.0, (2, 1.0)),  # environ overwritten
        (4, 3.0): suite_cpu.Seen("other", None, 1.0, (99, 0.0)),  # parent never seen
    }
    suite_cpu.attribute(seen)
    assert seen[(3, 2.0)].module == "test_end_to_end.py" and seen[(4, 3.0)].module is None
