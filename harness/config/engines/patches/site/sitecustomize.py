"""Runs first in every Python process of a server the harness launched with engine patches
(``harness.config.engines.patches``: this directory is first on the server's PYTHONPATH). Standard library
only, and nothing at all unless ``SPEC_BENCH_ENGINE_PATCHES`` names a patch.

For each ``name@hash``: the patch file must still have that hash (what the run recorded is what
runs), the installed engine must be a release the patch was written for (otherwise the process
exits: a patch is never applied to code it was not written against), and the patch is applied
right after the engine imports its target module.
"""

import hashlib
import importlib.abc
import importlib.metadata
import importlib.util
import os
import sys
from pathlib import Path

ENV_VAR = "SPEC_BENCH_ENGINE_PATCHES"
APPLIED_MARK = "spec-bench: engine patch"  # harness.config.engines.patches.APPLIED_MARK
PATCH_DIR = Path(__file__).resolve().parent.parent


def _refuse(message: str) -> None:
    print(f"{APPLIED_MARK} refused: {message}", file=sys.stderr, flush=True)
    os._exit(2)  # the server does not start (SystemExit here would end in a start-up traceback)


def _load(entry: str):
    name, _, digest = entry.partition("@")
    path = PATCH_DIR / f"{name.replace('-', '_')}.py"
    if not path.is_file():
        _refuse(f"{name}: no such patch ({path})")
    actual = hashlib.sha256(path.read_bytes()).hexdigest()
    if not actual.startswith(digest):
        _refuse(f"{name}: {path} has sha256 {actual[:12]}, the run planned {digest}")
    spec = importlib.util.spec_from_file_location(f"_spec_bench_patch_{name.replace('-', '_')}", path)
    patch = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(patch)
    installed = {}
    for distribution in patch.DISTRIBUTIONS:
        try:
            installed[distribution] = importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    if not any(v.split("+")[0] in patch.DISTRIBUTIONS[d] for d, v in installed.items()):
        found = ", ".join(f"{d} {v}" for d, v in installed.items()) or "none of them installed"
        wanted = ", ".join(f"{d} {' / '.join(v)}" for d, v in patch.DISTRIBUTIONS.items())
        _refuse(f"{name} is written for {wanted}; found {found}")
    return name, actual[:12], patch


class _AfterImport(importlib.abc.MetaPathFinder):
    """Applies ``patch`` to ``target`` as soon as that module has been executed, once."""

    def __init__(self, name: str, digest: str, patch) -> None:
        self.name, self.digest, self.patch = name, digest, patch

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.patch.TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        run_module = spec.loader.exec_module

        def exec_module(module) -> None:
            run_module(module)
            self.patch.apply(module)
            print(
                f"{APPLIED_MARK} {self.name}@{self.digest} applied to {fullname} (pid {os.getpid()})",
                file=sys.stderr,
                flush=True,
            )

        spec.loader.exec_module = exec_module
        return spec


for _entry in filter(None, os.environ.get(ENV_VAR, "").split(",")):
    sys.meta_path.insert(0, _AfterImport(*_load(_entry)))
