"""`bench validate REGIME --download` (issue 78, item 6): the target and the drafters a regime names by
hub id, fetched into the Hugging Face cache before the night, so that no first start-up spends its
``engine.startup_timeout_s`` downloading (DeepSeek-V3's ~690 GB would). Their size first: the
hub's file list (``HfApi.model_info(files_metadata=True)``, less what the cache holds already),
else the regime's own estimate (``model_sizes.weight_size``), against the free space of the cache's
disk (``shutil.disk_usage``); a download that does not fit is refused before a byte is fetched.
The servers read the same cache (``HF_HOME`` / ``HF_HUB_CACHE``, inherited)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from harness.config.model_sizes import gb, weight_size
from harness.config.models import is_local_reference
from harness.config.regime import Regime
from harness.core.errors import UserError

HEADROOM = 1.02  # a download's temporary files and the metadata beside the blobs


@dataclass(frozen=True)
class Fetch:
    """One hub repository to fetch: its id, what the regime uses it for, its size in bytes and how
    much of it the cache lacks (None: not known), and where the size is from."""

    repo_id: str
    roles: tuple[str, ...]
    size: float | None
    missing: float | None
    source: str

    def text(self) -> str:
        size = "size not known" if self.size is None else gb(self.size)
        have = (
            ""
            if self.missing is None or self.missing == self.size
            else f", {gb(self.missing)} not cached yet"
        )
        return f"{self.repo_id} ({', '.join(self.roles)}): {size}{have} ({self.source})"


def hub_references(regime: Regime) -> dict[str, list[str]]:
    """Each hub id the regime's servers would download, with what it is for: the target and every
    arm's ``draft_model`` given as a hub id (a local path, a packaged GGUF file or a drafter this
    harness builds is not fetched)."""
    found: dict[str, list[str]] = {}
    target = regime.target.path
    if target and not is_local_reference(target):
        found.setdefault(target, []).append("target")
    for arm in regime.arms:
        path = arm.draft_model.path if arm.draft_model is not None else None
        if path and not is_local_reference(path):
            found.setdefault(path, []).append(f"{arm.name}'s drafter")
    return found


def _hub() -> Any:
    try:
        import huggingface_hub
    except ImportError:
        raise UserError(
            "--download needs huggingface_hub (the engines install it: run this in the engine's environment, "
            "or pip install huggingface_hub)"
        ) from None
    return huggingface_hub


def cache_dir() -> Path:
    """The Hugging Face hub cache the servers read (``HF_HUB_CACHE``, else ``HF_HOME``/hub)."""
    return Path(_hub().constants.HF_HUB_CACHE)


def _sizes(repo_id: str, hub: Any) -> tuple[float, float]:
    """(bytes the hub lists for the repository, bytes of them not in the cache)."""
    info = hub.HfApi().model_info(repo_id, files_metadata=True)
    size = missing = 0.0
    for sibling in info.siblings or []:
        size += sibling.size or 0
        cached = hub.try_to_load_from_cache(repo_id, sibling.rfilename, revision=info.sha)
        if not isinstance(cached, str):
            missing += sibling.size or 0
    return size, missing


def plan_fetches(regime: Regime, hub: Any = None, done: frozenset[str] = frozenset()) -> list[Fetch]:
    """What ``--download`` would fetch (less the repositories in ``done``), each with its size: the
    hub's, else (the hub unreachable) the target's estimated weights, else not known."""
    hub = hub or _hub()
    estimate = weight_size(regime)
    fetches = []
    for repo_id, roles in hub_references(regime).items():
        if repo_id in done:
            continue
        try:
            size, missing = _sizes(repo_id, hub)
            fetches.append(Fetch(repo_id, tuple(roles), size, missing, "the hub's file list"))
            continue
        except Exception as exc:  # offline, a gated repository without a token, a name the hub lacks
            first = (str(exc).splitlines() or [""])[0]
            why = f"the hub did not answer: {type(exc).__name__}: {first}"
        if "target" in roles and estimate is not None:
            fetches.append(Fetch(repo_id, tuple(roles), estimate.stored, estimate.stored, f"estimate; {why}"))
        else:
            fetches.append(Fetch(repo_id, tuple(roles), None, None, why))
    return fetches


def _free_bytes(folder: Path) -> tuple[Path, float]:
    """The nearest existing folder at or above ``folder`` and the free bytes of its disk."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    return existing, float(shutil.disk_usage(existing).free)


def check_space(fetches: list[Fetch], folder: Path) -> str:
    """Refuse (``UserError``) a download that the cache's disk cannot hold; else say what it needs."""
    needed = sum(f.missing or 0 for f in fetches)
    disk, free = _free_bytes(folder)
    if needed * HEADROOM > free:
        largest = max(fetches, key=lambda f: f.missing or 0)
        raise UserError(
            f"the download needs {gb(needed)} in {folder} (the largest: {largest.text()}), and {gb(free)} "
            f"are free on {disk}'s disk: free space, or point HF_HOME (or HF_HUB_CACHE) at a disk with room; "
            "the servers read the same cache"
        )
    unknown = [f.repo_id for f in fetches if f.missing is None]
    also = f" and {', '.join(unknown)} of a size not known" if unknown else ""
    return f"{gb(needed)}{also} to fetch into {folder}, {gb(free)} free there"


def download(
    regime: Regime,
    console: Console,
    hub: Any = None,
    downloader: Callable[..., str] | None = None,
    done: frozenset[str] = frozenset(),
) -> dict[str, str]:
    """Fetch every hub repository the regime names (but those in ``done``: a study's earlier point
    fetched them) into the cache, after checking the cache's disk holds them: each repository's local
    path."""
    hub = hub or _hub()
    downloader = downloader or hub.snapshot_download
    fetches = plan_fetches(regime, hub, done)
    if not fetches and done:
        return {}
    if not fetches:
        console.print("Nothing to download: the target and every drafter are local or built here.")
        return {}
    folder = Path(hub.constants.HF_HUB_CACHE)
    for fetch in fetches:
        console.print(f"  {fetch.text()}", highlight=False, markup=False, soft_wrap=True)
    console.print(check_space(fetches, folder), highlight=False, markup=False)
    paths = {}
    for fetch in fetches:
        console.print(f"Fetching {fetch.repo_id}...", highlight=False, markup=False)
        try:
            paths[fetch.repo_id] = downloader(fetch.repo_id)
        except Exception as exc:
            token = "" if "token" in str(exc).casefold() else " (a gated model needs HF_TOKEN set)"
            raise UserError(
                f"downloading {fetch.repo_id} failed: {type(exc).__name__}: {exc}{token}"
            ) from None
        console.print(f"  {fetch.repo_id}: at {paths[fetch.repo_id]}", highlight=False, markup=False)
    return paths
