"""``bench run`` as its own process, its address space limited (``RLIMIT_AS``), against stand-in
engines that misbehave: each arm named in ``MODES`` is served by tests/hostile_server.py in that
mode, the others by benchmarks/stream_server.py (tests/test_run_plan.py's StandIn). Used by
tests/test_chaos.py.

    python tests/chaos_bench.py LIMIT_BYTES REGIME RESULTS_DIR
"""

from __future__ import annotations

import resource
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODES = {"ngram_flood": "token-flood", "ngram_endless": "endless-event", "ngram_control": "control-error"}


def main() -> int:
    limit, regime, results = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
    sys.path.insert(0, str(ROOT))
    import harness.run.plan
    from harness.cli import main as bench
    from harness.config.engines import LaunchSpec
    from tests.test_run_plan import StandIn

    class Hostile(StandIn):
        def launch_spec(self, regime, arm, model, port, python, draft_model=None) -> LaunchSpec:
            if arm.name not in MODES:
                return super().launch_spec(regime, arm, model, port, python, draft_model)
            server = str(ROOT / "tests" / "hostile_server.py")
            return LaunchSpec([python, server, "--port", str(port), "--every", MODES[arm.name]])

    harness.run.plan.get_adapter = lambda name: Hostile()
    return bench(["run", regime, "--results-dir", results, "--allow-mismatch"])


if __name__ == "__main__":
    sys.exit(main())
