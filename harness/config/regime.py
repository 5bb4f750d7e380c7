"""The regime file: the exact conditions a speculative-decoding number is true in.

A regime pins the hardware, the engine (and its version), the target model, its dtype and
quantization, the tensor-parallel degree, sampling, load, price, the workloads, and the arms
(baseline, ngram, draft model, EAGLE-3, DFlash), each with its draft depth K. Everything a user
writes is validated strictly (unknown keys are errors); ``load_regime`` reports problems with
file, line and dotted path. Each part is a module of its own (``hardware``, ``engine_settings``,
``target``, ``load``, ``arms``, ``checks``, ``study``); this one holds the whole file, the checks
across its parts, its fingerprints, and reading it (or a stored copy) back.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field, model_validator

from harness.config.arms import NAME_PATTERN, Arm, endpoint_address, published_problems
from harness.config.checks import DistributionCheck, Exactness, Gate, Gates, Power, VerdictSettings
from harness.config.engine_settings import Engine
from harness.config.hardware import Cost, Hardware
from harness.config.load import DecidedStarts, Load, Sampling, Slo
from harness.config.reference import PaceReference
from harness.config.study import PolicySettings, Sweep, check_sweep
from harness.config.target import TargetModel
from harness.config.workloads import ChatTemplate, RandomPrompts
from harness.core.config_file import StrictModel, existing_path, load_model
from harness.core.errors import FieldError, UserError
from harness.core.probes.exactness import DEFAULT_NEAR_TIE_MARGIN
from harness.core.secrets import REDACTED, redact_args, redact_env, redact_url

if TYPE_CHECKING:
    from harness.core.overrides import Override


class Regime(StrictModel):
    """A complete regime file."""

    name: str = Field(
        pattern=NAME_PATTERN, description="Regime name; results go to results/<name>/<run-id>/."
    )
    description: str = Field(default="", description="Free text shown in reports.")
    hardware: Hardware = Field(description="What the regime runs on (GPU model and count, or cpu).")
    engine: Engine = Field(description="Serving engine, version pin and launch options.")
    target: TargetModel = Field(description="The target model, its dtype, quantization and context length.")
    tensor_parallel_size: int = Field(
        default=1, ge=1, description="Tensor-parallel degree (--tensor-parallel-size)."
    )
    sampling: Sampling = Field(description="Sampling sent with every request; temperature must be explicit.")
    chat: ChatTemplate = Field(
        default_factory=ChatTemplate,
        description="Chat-template arguments and a system prompt for every chat request, on top of each chat "
        "workload's own (e.g. template_kwargs: {enable_thinking: false}: Qwen3 answers without thinking). "
        "Recorded per workload with the results; part of the conditions runs are compared under.",
    )
    load: Load = Field(description="Concurrency levels, prompts per window, output length, warm-up.")
    cost: Cost = Field(description="Hardware price, for $/Mtok.")
    slo: Slo | None = Field(
        default=None,
        description="Latency targets (ttft_ms, tpot_ms, e2e_ms; any subset): adds SLO attainment and goodput "
        "to every cell, the tables and the gates. Part of the conditions runs are compared under.",
    )
    exactness: Exactness = Field(default_factory=Exactness, description="Greedy-exactness probe settings.")
    verdict: VerdictSettings = Field(
        default_factory=VerdictSettings,
        description="How the verdict reads the intervals: the precision it aims for, and claims held over "
        "every window at once (familywise).",
    )
    distribution_check: DistributionCheck = Field(
        default_factory=DistributionCheck,
        description="At temperature > 0: the output-distribution check that replaces greedy exactness.",
    )
    power: Power = Field(default_factory=Power, description="Power probe settings.")
    reference: PaceReference | None = Field(
        default=None,
        description="The run the regime's figures were measured in and its baseline's pace there: a run "
        "elsewhere says how much faster or slower it ran, and which CPU features it lacks. Not a "
        "condition (not fingerprinted). Unset: the newest earlier run of the regime on another machine.",
    )
    allow_lossy_acceptance: bool = Field(
        default=False,
        description="Allow settings that make acceptance lossy or fake (vLLM rejection_sample_method "
        "synthetic/fly, SGLang accept thresholds < 1, SGLANG_SIMULATE_ACC_LEN). Refused otherwise; always "
        "flagged in results.",
    )
    allow_shared_endpoints: bool = Field(
        default=False,
        description="Let two arms name the same server (arms[].endpoint): refused otherwise, since such "
        "a comparison is the server against itself (an A/A check of the harness's noise, or a server "
        "that is told per request what to do); every such arm carries a caveat.",
    )
    workloads: list[str | RandomPrompts] = Field(
        min_length=1,
        description="Workload files, relative to this regime file: a workload YAML, or a .jsonl prompt file "
        "itself; or {dataset: random, input_len: N}, random prompts of N tokens of the target's tokenizer "
        "(bench run --dataset).",
    )
    arms: list[Arm] = Field(min_length=1, description="Arms; exactly one must be the baseline.")
    gates: Gates = Field(default_factory=Gates, description="Regression gates checked by `bench gate`.")
    policy: PolicySettings = Field(
        default_factory=lambda: PolicySettings(),
        description="How a study's speculation policy is derived (policy.yaml in the study directory).",
    )
    sweep: Sweep | None = Field(
        default=None,
        description="Make this regime a study: regime-level axes become points (each its own run), "
        "arm-level axes become arms of every point. See harness/run/study/sweep.py.",
    )

    @model_validator(mode="after")
    def _consistent(self) -> Regime:
        names = [arm.name for arm in self.arms]
        for index, name in enumerate(names):
            if name in names[:index]:
                raise FieldError(("arms", index, "name"), f"arm names must be unique; repeated: {name}")
        baselines = [index for index, arm in enumerate(self.arms) if arm.method == "baseline"]
        if len(baselines) != 1:
            raise FieldError(
                ("arms", baselines[1], "method") if baselines else "arms",
                "exactly one arm must have method 'baseline' (speedups are against it); found "
                f"{len(baselines)}",
            )
        for index, gate in enumerate(self.gates.rules):
            self._check_gate(index, gate, names)
        for index, arm in enumerate(self.arms):
            for entry, figure in enumerate(arm.published):
                if figure.concurrency is not None and figure.concurrency not in self.load.concurrency:
                    raise FieldError(
                        ("arms", index, "published", entry, "concurrency"),
                        f"{figure.concurrency} is not one of load.concurrency",
                    )
            temperature = self.sampling.temperature
            for (entry, field), message in published_problems(
                arm.published, arm.method, arm.drafting_shape(), temperature
            ):
                raise FieldError(("arms", index, "published", entry, field), message)
        if self.sampling.temperature > 0 and self.exactness.near_tie_margin is not None:
            raise FieldError(
                ("exactness", "near_tie_margin"),
                "a greedy-only setting, but sampling.temperature is "
                f"{self.sampling.temperature:g} (sampled runs get the distribution check instead)",
            )
        self._check_hardware_fits()
        self._check_endpoints()
        check_sweep(self)
        return self

    def endpoints(self) -> bool:
        """Whether the arms are existing servers (``arms[].endpoint``) rather than servers it starts."""
        return any(arm.endpoint is not None for arm in self.arms)

    def _check_endpoints(self) -> None:
        """Every arm an endpoint, or none: a fresh start-up's spread and a running deployment's
        window-to-window spread are two questions, and one interval cannot answer both."""
        if not self.endpoints():
            return
        for index, arm in enumerate(self.arms):
            if arm.endpoint is None:
                raise FieldError(
                    ("arms", index, "endpoint"),
                    f"every arm is an existing server (endpoint) or none is: {self._endpoint_ways(arm)}, or "
                    "measure started servers only",
                )
        if self.engine.patches:
            raise FieldError(
                ("engine", "patches"), "a patch applies to servers the harness starts, not to endpoints"
            )
        seen: dict[str, int] = {}
        for index, arm in enumerate(self.arms):
            first = seen.setdefault(endpoint_address(arm.endpoint or ""), index)
            if first != index and not self.allow_shared_endpoints:
                raise FieldError(
                    ("arms", index, "endpoint"),
                    f"the same server as arms[{first}] ({self.arms[first].name}): two arms on one server "
                    "compare it with itself; give each arm its own server, or set allow_shared_endpoints: "
                    "true if that is what you mean (each such arm is then flagged)",
                )

    def _endpoint_ways(self, missing: Arm) -> str:
        """What an arm without a server can do when others have one: get its server, or be left out
        with ``--arms`` naming exactly the arms that have one (the baseline always runs, so it
        cannot be left out that way)."""
        given = f"give this arm the server to measure (bench run --endpoint {missing.name}=URL"
        if missing.method == "baseline":
            return f"{given}; the baseline always runs: --arms cannot leave it out)"
        kept = [arm.name for arm in self.arms if arm.endpoint is not None and arm.method != "baseline"]
        keep = f", or measure only the arms with a server (bench run --arms {','.join(kept)})" if kept else ""
        return f"{given}){keep}"

    def _check_hardware_fits(self) -> None:
        """TP and the price match the hardware kind."""
        if self.hardware.kind == "cpu" and self.tensor_parallel_size != 1:
            raise FieldError(
                "tensor_parallel_size",
                f"a cpu regime runs with tensor_parallel_size 1 (got {self.tensor_parallel_size})",
            )
        if self.hardware.kind == "cpu" and self.cost.usd_per_machine_hour is None:
            raise FieldError(
                ("cost", "usd_per_gpu_hour"),
                "a cpu regime is priced per machine-hour (cost.usd_per_machine_hour)",
            )
        if self.hardware.kind == "gpu" and self.hardware.gpu_count % self.tensor_parallel_size != 0:
            raise FieldError(
                "tensor_parallel_size",
                f"tensor_parallel_size {self.tensor_parallel_size} must divide hardware.gpu_count "
                f"{self.hardware.gpu_count}",
            )
        # the harness gives each server its GPUs (hardware.devices): a second say in engine.env would
        # leave power and the neighbour check reading GPUs the server does not use
        taken = [n for n in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER") if n in self.engine.env]
        if self.hardware.kind == "gpu" and taken:
            raise FieldError(
                ("engine", "env", taken[0]),
                "the harness sets it for each server from hardware.devices (default: the first "
                "tensor_parallel_size GPUs visible to it): pin the GPUs there",
            )
        devices = self.hardware.devices
        if devices is not None and len(devices) != self.tensor_parallel_size:
            raise FieldError(
                ("hardware", "devices"),
                f"{len(devices)} GPU(s) for a server of tensor_parallel_size {self.tensor_parallel_size}: "
                "list one per rank",
            )
        if self.hardware.kind == "gpu" and self.cost.usd_per_gpu_hour is None:
            raise FieldError(
                ("cost", "usd_per_machine_hour"),
                "a gpu regime is priced per GPU-hour (cost.usd_per_gpu_hour)",
            )

    def _check_gate(self, index: int, gate: Gate, names: list[str]) -> None:
        """A rule names an arm, a metric and load levels the regime has."""
        where = ("gates", "rules", index)
        if gate.arm != "*" and gate.arm not in names:
            raise FieldError(
                (*where, "arm"),
                f"no arm named '{gate.arm}' (arms: {', '.join(names)})",
                value=gate.arm,
                choices=names,
            )
        if gate.metric in ("slo_pct", "goodput_rps") and self.slo is None:
            raise FieldError(
                (*where, "metric"),
                f"{gate.metric} needs SLO targets: add slo: {{ttft_ms, tpot_ms, e2e_ms}} "
                "(any of them, in ms)",
            )
        if gate.request_rate is not None and gate.request_rate not in self.load.request_rate:
            raise FieldError(
                (*where, "request_rate"), f"{gate.request_rate:g} is not one of load.request_rate"
            )
        if gate.concurrency is not None and gate.concurrency not in self.load.concurrency:
            raise FieldError((*where, "concurrency"), f"{gate.concurrency} is not one of load.concurrency")

    def near_tie_margin(self) -> float:
        if self.exactness.near_tie_margin is not None:
            return self.exactness.near_tie_margin
        return DEFAULT_NEAR_TIE_MARGIN[self.target.dtype]

    def exactness_applies(self) -> bool:
        """Exactness is only meaningful for greedy decoding."""
        return self.exactness.enabled and self.sampling.temperature == 0

    def distribution_applies(self) -> bool:
        """The distribution check replaces exactness when the regime samples."""
        return self.distribution_check.enabled and self.sampling.temperature > 0

    @property
    def baseline_arm(self) -> Arm:
        return next(arm for arm in self.arms if arm.method == "baseline")

    def price_per_hour(self) -> float:
        """$ per hour for the hardware one server occupies: its tensor_parallel_size GPUs (a TP=2 server
        on an 8-GPU node leaves six for other replicas), or the machine."""
        if self.cost.usd_per_gpu_hour is not None:
            return self.cost.usd_per_gpu_hour * self.tensor_parallel_size
        return self.cost.usd_per_machine_hour  # type: ignore[return-value]

    def fingerprint(self) -> str:
        """A stable hash of everything that defines the regime (not its name, description or gates)."""
        redacted = self.redacted()  # a secret is not a condition (harness.core.secrets)
        fields = redacted.model_dump(
            mode="json", exclude=_excluded(_NOT_CONDITIONS | {"arms"}) | self._unset()
        )
        # when a drafter build gives up is not part of the regime (nor of the drafter's identity)
        fields["arms"] = [_arm_fields(arm) for arm in redacted.arms]
        if self.engine.patches:  # a patch is its code: an edited patch is another regime
            fields["engine"]["patches"] = self.engine.patch_labels()
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]

    def redacted(self) -> Regime:
        """This regime with the secrets in ``engine.env`` and ``engine.extra_args`` replaced by
        ``<redacted>`` (``harness.core.secrets``): what is written, printed and fingerprinted."""
        engine = self.engine.model_copy(
            update={"env": redact_env(self.engine.env), "extra_args": redact_args(self.engine.extra_args)}
        )
        arms = [  # an endpoint's credentials (https://user:pass@host)
            arm.model_copy(update={"endpoint": redact_url(arm.endpoint)}) if arm.endpoint else arm
            for arm in self.arms
        ]
        return self.model_copy(update={"engine": engine, "arms": arms})

    def _unset(self) -> dict[str, Any]:
        """Settings left out of the hashes while unset (no SLO, no open-loop rate): fingerprints from
        before they existed hold."""
        unset: dict[str, Any] = {"slo": True} if self.slo is None else {}
        # hardware.devices says where a server runs, never what it runs: always left out
        unset["hardware"] = {"devices"} | (
            set() if self.hardware.gpu_models_accepted else {"gpu_models_accepted"}
        )
        engine_unset = {"patches"} if not self.engine.patches else set()
        engine_unset |= set() if self.engine.eager_speculation else {"eager_speculation"}
        if engine_unset:
            unset["engine"] = engine_unset
        load_fields = (
            self.load.open_loop_fields()
            | ({"server_starts"} if self.load.server_starts == 1 else set())  # an int N hashes as before
            | (set() if self.load.ramp else {"ramp"})
            | ({"context_tokens"} if self.load.context_tokens is None else set())
        )
        load_unset: dict[str, Any] = dict.fromkeys(load_fields, True)
        starts = self.load.server_starts
        if isinstance(starts, DecidedStarts):  # issue 69's fields: the fingerprints from before hold
            load_unset["server_starts"] = {"effect": True} | (  # the outlook's, never a condition
                ({"windows": True} if not starts.windows else {})
                | ({"budget_minutes": True} if starts.budget_minutes is None else {})
            )
        if load_unset:
            unset["load"] = load_unset
        if fields := self.sampling.unset():
            unset["sampling"] = fields
        if self.distribution_check == DistributionCheck():
            unset["distribution_check"] = True
        elif fields := self.distribution_check.unset():
            unset["distribution_check"] = fields
        return unset

    def conditions_fingerprint(self, prompts: list[tuple[str, str, str]]) -> str:
        """The conditions the arms are measured in (hardware, engine, target, TP, sampling, load, cost,
        and the prompts: ``prompts`` as stored with a run, (name, format, content hash) per workload,
        sorted, not by file path: ``RunRecord.prompts``), without the arms themselves: two runs with
        equal conditions can be gated against each other arm by arm, even when an arm's configuration
        changed between them."""
        fields = self.redacted().model_dump(
            mode="json", exclude=_excluded(_NOT_CONDITIONS | {"arms", "workloads"}) | self._unset()
        )
        fields["prompts"] = [list(p) for p in prompts]  # as JSON writes tuples
        if self.engine.patches:
            fields["engine"]["patches"] = self.engine.patch_labels()
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]

    def target_reference(self) -> str:
        """The target as golden tau entries name it."""
        if self.target.package is not None:
            return f"{self.target.package.name}:{self.target.package.file}"
        return self.target.path or ""


_NOT_CONDITIONS = {
    "name",
    "description",
    "gates",
    "sweep",
    "policy",
    "verdict",
    "allow_shared_endpoints",
    "reference",
}


def _excluded(names: set[str]) -> dict[str, Any]:
    return dict.fromkeys(names, True)


# published figures are what the run is read against, not a condition of it (like verdict:)
_NOT_OF_THE_ARM = {
    "draft_model": {"trained": {"stall_timeout_s"}},
    "k_schedule_source": True,
    "published": True,
}


def _arm_fields(arm: Arm) -> dict[str, Any]:
    """What defines an arm, for the fingerprint: a schedule is, while given (arms without one hash as
    before it existed); where it came from is provenance, not a condition."""
    excluded: dict[str, Any] = {**_NOT_OF_THE_ARM, "api_key_env": True}  # where a key is, not what runs
    if arm.k_schedule is None:
        excluded["k_schedule"] = True
    if arm.endpoint is None:  # regimes without endpoints hash as before they existed
        excluded["endpoint"] = True
    return arm.model_dump(mode="json", exclude=excluded)


def load_regime(path: str | Path, overrides: Sequence[Override] = ()) -> Regime:
    """Load and validate a regime file, with the command line's ``overrides`` set in it. Raises
    UserError naming file, line and field (or the override) on bad input."""
    from harness.core.overrides import apply_overrides

    return load_model(Path(path), Regime, edit=lambda data: apply_overrides(data, overrides))


def recorded_source(recorded: str, directory: Path) -> Path:
    """The regime file a run or study (``directory``) recorded it came from. Recorded absolute since
    issue 64, so a resume works from any directory; a relative path, as earlier runs recorded it, is
    tried from here, then from each folder above the run (a run under ``results/`` of the folder it
    was started in)."""
    path = Path(recorded)
    if path.is_absolute() or path.exists():
        return path
    for folder in list(directory.resolve().parents)[:4]:
        if (folder / path).is_file():
            return folder / path
    return path


def stored_regime(stored: dict[str, Any], source: Path) -> Regime:
    """A regime read back from a run or a study (``regime.json``, ``study.json``), its redacted
    secrets restored to start servers again: each from the regime file it came from (``source``),
    an environment variable the file no longer sets from the environment the servers inherit.
    Refused when a secret can be found in neither."""
    regime = Regime.model_validate(stored)
    engine = regime.engine
    hidden_env = [name for name, value in engine.env.items() if REDACTED in value]
    hidden_args = [i for i, arg in enumerate(engine.extra_args) if REDACTED in arg]
    hidden_endpoints = [i for i, arm in enumerate(regime.arms) if arm.endpoint and REDACTED in arm.endpoint]
    if not hidden_env and not hidden_args and not hidden_endpoints:
        return regime
    try:
        current, unread = load_regime(source).engine, ""
    except UserError as error:  # said with the secret it was needed for
        current, unread = None, f" (the regime file could not be read: {error})"
    env = dict(engine.env)
    for name in hidden_env:
        if current is not None and name in current.env:
            env[name] = current.env[name]
        elif name in os.environ:
            del env[name]  # the server inherits it
        else:
            raise UserError(
                f"{source}: engine.env.{name}: its value was not stored (a secret); set {name} in the "
                f"environment, or restore it in the regime file, to continue{unread}"
            )
    args = list(engine.extra_args)
    if hidden_args:
        if current is None or redact_args(current.extra_args) != engine.extra_args:
            raise UserError(
                f"{source}: engine.extra_args[{hidden_args[0]}]: its secret was not stored and the regime "
                f"file's extra_args are no longer the run's; restore them to continue{unread}"
            )
        args = list(current.extra_args)
    arms = list(regime.arms)
    if hidden_endpoints:
        # an endpoint's credentials come back from the regime file, by the arm's name
        written = {} if current is None else _endpoints_in(source)
        for index in hidden_endpoints:
            restored = written.get(arms[index].name)
            if restored is None or redact_url(restored) != arms[index].endpoint:
                raise UserError(
                    f"{source}: arms[{index}].endpoint: its credentials were not stored and the regime file "
                    f"no longer gives them{unread}; write them there (or keep them out of the URL: "
                    "api_key_env) to continue"
                )
            arms[index] = arms[index].model_copy(update={"endpoint": restored})
    return regime.model_copy(
        update={"engine": engine.model_copy(update={"env": env, "extra_args": args}), "arms": arms}
    )


def _endpoints_in(source: Path) -> dict[str, str]:
    return {arm.name: arm.endpoint for arm in load_regime(source).arms if arm.endpoint}


def workload_paths(regime: Regime, regime_path: Path) -> list[Path]:
    """Workload files resolve relative to the regime file, so a regime directory can move as a unit;
    each must exist (else the error names the regime file, ``workloads[i]`` and its line). Random
    prompts (``{dataset: random}``) have no file: ``harness.run.datasets`` makes them."""
    return [
        existing_path(regime_path, ("workloads", index), entry, "workload file")
        for index, entry in enumerate(regime.workloads)
        if isinstance(entry, str)
    ]
