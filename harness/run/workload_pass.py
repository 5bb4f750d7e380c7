"""The baseline's workload pass, planned: whether it applies (``workload_pass_reason``), each
workload's whole pool rendered as its windows render their prompts, the key its outputs are kept
under, and whether a complete pass is kept already (``workload_pass_plan``, made with the plan:
``bench validate`` and ``bench run`` say it). ``harness.run.passes.workload_pass`` sends it.

The covariate estimator (``verdict.covariate``, ``harness.derive.covariate``) regresses each
prompt's gain on its copy share, which needs the share's mean over the WHOLE workload, not only the
``load.num_prompts`` a run samples: the baseline answers every prompt of the pool once, greedy,
closed loop at the regime's lowest concurrency (at most 8), unmeasured. Its outputs depend on the
engine, the model, the sampling, the output length, the pool and the machine, never on the arms:
a complete pass is kept under ``cache_root()/workload-pass/<key>.jsonl`` (a line of metadata, then
one ``RequestRecord`` per prompt) and later runs copy it instead of sending anything.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from harness.config.models import converted_dir
from harness.config.regime import Regime
from harness.config.workloads import ChatTemplate, LoadedWorkload, load_prompt_pool, loaded_workload
from harness.core.cache import cache_root
from harness.core.config_file import existing_path
from harness.core.secrets import redact_args, redact_env
from harness.results import RequestRecord

CACHE_FOLDER = "workload-pass"
CACHE_FORMAT = 1  # the kept file's layout: a metadata line, then the records
# the most prompts one workload's pass sends: a pool larger than this (a user's prompt file of tens of
# thousands) is not passed over; its covariate falls back to the prompts' jackknife alone, said
MAX_POOL = 2000
MAX_CONCURRENCY = 8


def workload_pass_reason(regime: Regime, workloads: Sequence[LoadedWorkload]) -> str | None:
    """Why the regime's run makes no workload pass, in words; None where it makes one: the covariate
    is asked for (``verdict.covariate``), greedy, the baseline a server the harness starts, every
    workload a fixed pool of single-turn prompts sent as they are (no ``load.context_tokens``) and
    of at most ``MAX_POOL`` prompts."""
    load = regime.load
    if regime.verdict.covariate == "none":
        return "verdict.covariate: none"
    if regime.sampling.temperature != 0:
        return f"sampling is not greedy (temperature {regime.sampling.temperature:g})"
    if regime.baseline_arm.endpoint is not None or regime.endpoints():
        return "the baseline is an existing server (endpoint): its machine is not this one"
    if load.context_tokens is not None:
        return f"load.context_tokens pads each prompt (to about {load.context_tokens} tokens)"
    for entry in regime.workloads:
        if not isinstance(entry, str):
            return f"workload {entry.name} is random prompts: no pool beyond the ones a run draws"
    for workload in workloads:
        if workload.turns > 1:
            return f"workload {workload.definition.name} is a conversation ({workload.turns} turns)"
    return None


def pass_concurrency(regime: Regime) -> int:
    """The pass's requests in flight: the regime's lowest closed-loop concurrency, at most 8, so its
    answers are those of the windows the covariate is read at; open loop only: its cap, or 8 (the
    answers of a greedy engine do not hang on the batch)."""
    load = regime.load
    levels = [*load.concurrency, *(stage.concurrency for stage in load.ramp if stage.concurrency)]
    if levels:
        return max(1, min(min(levels), MAX_CONCURRENCY))
    return min(load.max_concurrency or MAX_CONCURRENCY, MAX_CONCURRENCY)


@dataclass(frozen=True)
class PoolPass:
    """One workload's pass: its whole pool, its cache key and file, and whether a complete pass is
    kept there now (``kept``: as the plan found it; the pass checks again before it sends)."""

    pool: LoadedWorkload  # every prompt of the workload's source, as its windows send them
    key: str
    path: Path
    kept: bool = False

    @property
    def name(self) -> str:
        return self.pool.name

    @property
    def prompts(self) -> int:
        return len(self.pool.prompts)


@dataclass(frozen=True)
class WorkloadPassPlan:
    """The workload pass as planned: ``reason`` (why none; None: it applies), its concurrency and
    each workload's pool."""

    reason: str | None
    concurrency: int = 1
    max_output_tokens: int = 0
    pools: tuple[PoolPass, ...] = ()

    @property
    def applies(self) -> bool:
        return self.reason is None

    @property
    def requests(self) -> int:
        """The requests the pass is expected to send (its pools not kept already)."""
        return sum(p.prompts for p in self.pools if not p.kept) if self.applies else 0

    def line(self) -> str:
        """The plan's ``Workload pass:`` line."""
        if self.reason is not None:
            return f"Workload pass: none ({self.reason}): the prompts' jackknife alone"
        sent = [p for p in self.pools if not p.kept]
        kept = [p for p in self.pools if p.kept]
        if not sent:
            where = ", ".join(str(p.path) for p in kept)
            return f"Workload pass: kept from an earlier run ({where}): no requests"
        pools = " and ".join(f"{p.name}'s {p.prompts:,} prompts" for p in sent)
        tokens = self.requests * self.max_output_tokens
        line = (
            f"Workload pass: every one of {pools} once on the baseline's first start-up (up to {tokens:,} "
            f"tokens at concurrency {self.concurrency}), for the covariate's workload mean"
        )
        if kept:
            line += "; " + ", ".join(f"{p.name}'s kept from an earlier run ({p.path})" for p in kept)
        where = str(sent[0].path) if len(sent) == 1 else f"{sent[0].path.parent}/"
        return f"{line}; kept at {where} for later runs"


def load_pools(regime: Regime, regime_path: Path) -> list[LoadedWorkload]:
    """Each workload's whole pool (file workloads only: ``workload_pass_reason`` says the rest), in
    file order, each prompt identified and rendered as ``load_workload`` does the ones it samples:
    the same ids and texts, the workload's chat settings with the regime's on top."""
    pools = []
    for index, entry in enumerate(regime.workloads):
        if not isinstance(entry, str):
            continue
        path = existing_path(regime_path, ("workloads", index), entry, "workload file")
        definition, prompts = load_prompt_pool(path)
        effective = None
        if definition.prompt_format == "chat":
            effective = (regime.chat or ChatTemplate()).over(definition.chat)
        pools.append(loaded_workload(definition, prompts, effective))
    return pools


def target_identity(regime: Regime, regime_path: Path) -> dict[str, Any]:
    """The target as the pass's outputs depend on it: a packaged GGUF by its converted folder's name
    (package, its version, file, conversion version), a local folder by its path and content hash
    (``model_identity``), a hub id as written; with its dtype, quantization and context length."""
    from harness.config.models import resolve_model_path
    from harness.run.sensors.environment import model_identity

    target = regime.target
    if target.package is not None:
        model: Any = {"package": converted_dir(target.package.name, target.package.file).name}
    else:
        reference = resolve_model_path(target.path or "", regime_path)
        identity = model_identity(reference)
        model = {"path": reference, "content_sha256": identity.get("content_sha256")}
    return {
        "model": model,
        "dtype": target.dtype,
        "quantization": target.quantization,
        "max_model_len": target.max_model_len,
    }


def machine_identity(regime: Regime, environment: dict[str, Any]) -> dict[str, Any]:
    """The machine as the pass's outputs depend on it: a CPU's model and instruction-set features
    (the CPU engine's kernels choose between them), or the GPUs' models and the tensor parallelism."""
    if regime.hardware.kind == "gpu":
        names = sorted({str(g.get("name")) for g in environment.get("gpus") or []})
        return {"gpus": names, "tensor_parallel_size": regime.tensor_parallel_size}
    return {
        "cpu_model": environment.get("cpu_model"),
        "cpu_flags": sorted(environment.get("cpu_flags") or []),
    }


def pass_key_fields(
    regime: Regime,
    regime_path: Path,
    pool: LoadedWorkload,
    engine_version: str,
    environment: dict[str, Any],
    concurrency: int,
) -> dict[str, Any]:
    """Everything one workload's pass outputs depend on, and nothing else (no arm, no other load
    level, no gate): the key is its hash (``pass_key``)."""
    engine = regime.engine
    return {
        "engine": {
            "name": engine.name,
            "version": engine_version,
            "enforce_eager": engine.enforce_eager,
            "attention_backend": engine.attention_backend,
            "extra_args": redact_args(engine.extra_args),
            "env": redact_env(engine.env),
            "patches": engine.patch_labels() if engine.patches else [],
        },
        "target": target_identity(regime, regime_path),
        "sampling": regime.sampling.model_dump(mode="json"),
        "max_output_tokens": regime.load.max_output_tokens,
        "ignore_eos": regime.load.ignore_eos,
        # the whole pool as sent: ids, texts, format, chat settings (loaded_workload's hash)
        "workload": {"name": pool.name, "content_sha256": pool.content_sha256, "prompts": len(pool.prompts)},
        "concurrency": concurrency,
        "machine": machine_identity(regime, environment),
    }


def pass_key(fields: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:24]


def cache_path(key: str) -> Path:
    return cache_root() / CACHE_FOLDER / f"{key}.jsonl"


def workload_pass_plan(
    regime: Regime,
    regime_path: Path,
    workloads: Sequence[LoadedWorkload],
    engine_version: str,
    environment: dict[str, Any],
) -> WorkloadPassPlan:
    """The workload pass of a regime on this machine: why none, or each pool with its key and whether
    the cache holds a complete pass for it now."""
    reason = workload_pass_reason(regime, workloads)
    if reason is not None:
        return WorkloadPassPlan(reason)
    pools = load_pools(regime, regime_path)
    large = next((p for p in pools if len(p.prompts) > MAX_POOL), None)
    if large is not None:
        reason = (
            f"workload {large.name} has {len(large.prompts):,} prompts, more than a pass sends ({MAX_POOL:,})"
        )
        return WorkloadPassPlan(reason)
    concurrency = pass_concurrency(regime)
    planned = []
    for pool in pools:
        fields = pass_key_fields(regime, regime_path, pool, engine_version, environment, concurrency)
        key = pass_key(fields)
        path = cache_path(key)
        kept = kept_pass(path, key, pool)[0] is not None
        planned.append(PoolPass(pool, key, path, kept))
    return WorkloadPassPlan(None, concurrency, regime.load.max_output_tokens, tuple(planned))


def complete(records: Sequence[RequestRecord], pool: LoadedWorkload) -> bool:
    """Whether ``records`` answer every prompt of the pool, each finished with no error."""
    finished = {r.prompt_id for r in records if r.workload == pool.name and r.ok}
    return finished >= {p.prompt_id for p in pool.prompts}


def kept_pass(
    path: Path, key: str, pool: LoadedWorkload
) -> tuple[list[dict[str, Any]] | None, dict[str, Any], str | None]:
    """The kept pass at ``path``: (its record lines, its metadata, None) where it is complete (its key,
    a valid record for every prompt of the pool and no other, each finished with no error); else
    (None, {}, what is wrong: None where there is no file)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, {}, None
    except (OSError, UnicodeDecodeError) as exc:
        return None, {}, f"unreadable ({exc.__class__.__name__}: {exc})"
    if not text.endswith("\n"):
        return None, {}, "its last line is cut short"
    try:
        lines = [json.loads(line) for line in text.splitlines()]
    except ValueError:
        return None, {}, "a line is not JSON"
    meta = lines[0] if lines and isinstance(lines[0], dict) else {}
    if meta.get("workload_pass") != CACHE_FORMAT or meta.get("key") != key:
        return None, {}, "its first line is not this pass's (another key, or not a kept pass)"
    rows = lines[1:]
    try:
        records = [RequestRecord.from_json(row) for row in rows]
    except (ValidationError, TypeError, AttributeError):
        return None, {}, "a line is not a valid request record"
    ids = [r.prompt_id for r in records]
    wanted = {p.prompt_id for p in pool.prompts}
    if len(ids) != len(set(ids)) or set(ids) != wanted:
        return None, {}, f"it answers {len(set(ids) & wanted)} of the pool's {len(wanted)} prompts"
    if not complete(records, pool):
        return None, {}, "a request in it did not finish"
    return rows, meta, None


def keep_pass(path: Path, key: str, records: Sequence[RequestRecord], run_id: str) -> str | None:
    """A complete pass kept at ``path`` (whole or not at all: a temp file, then ``os.replace``); what
    went wrong where it cannot be written (a read-only cache), else None."""
    meta = {
        "workload_pass": CACHE_FORMAT,
        "key": key,
        "workload": records[0].workload if records else None,
        "prompts": len(records),
        "run_id": run_id,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    lines = [json.dumps(meta, sort_keys=True)] + [json.dumps(r.to_json(), sort_keys=True) for r in records]
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        return f"{exc.__class__.__name__}: {exc}"
    return None
