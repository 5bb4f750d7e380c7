"""Simulated runs as raw records, for the coverage benchmark's out-of-model scenarios: each run is a
``RawRun`` (what ``read_raw`` gives from a run directory: every request with its prompt, send and
completion times and token ids, every window with its start-up and length), and the harness's own
``summarize`` and ``window_verdicts`` derive its intervals and verdicts, so the path from raw files
to the verdict is the one a real run takes (``write_run`` stores one as files, to check that).

The world a run samples (concurrency 1, requests back to back):

- the workload: a population of prompts; each window's prompts are a fresh sample of it. A
  prompt's baseline time is log-normal (sd 0.5: prompts differ in length and difficulty), and
  each speculative arm's gain on it is log-normal around the arm's mean, ``prompt_sd`` apart (this
  project measured 0.19-0.21 for ngram on code at concurrency 1). The truth is the WORKLOAD's
  speedup: the population's tokens over its time, exp(mean log gain - prompt_sd^2 / 2) with the
  same tokens per prompt, which the simulation sets to ``truth``;
- each arm's server start-up its own speed (log-normal, ``startup_sd`` times the arm's own factor:
  one arm may spread 2x or 3x the others), each round a drift shared by its start-ups (2%), each
  request a jitter of its own (5%);
- the same prompts go to every start-up of a window, in the same order, ``repeats`` times;
- with ``covariate_r2`` (issue 81): the workload is a file of ``pool`` prompts drawn from that
  population, its gains scaled so that the file's own speedup is exactly the truth, each run's
  prompts a sample of the file; each prompt's baseline answer copies a share of its 3-grams from its
  prompt (``TOKENS`` tokens, the share in steps of 1/22) that explains ``covariate_r2`` of the
  prompts' log gains, and the baseline's first start-up answers every prompt of the file once more
  (the workload pass: its answers are the windows').
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from harness.config.checks import Exactness, VerdictSettings
from harness.config.regime import Regime, load_regime
from harness.derive.intervals import residual_spread
from harness.results.calibration import Calibration
from harness.results.files import SCHEMA_VERSION, RunDir
from harness.results.raw import RawArm, RawRun
from harness.results.records import ArmStatus, RequestRecord, RunRecord, WindowRecord

ROOT = Path(__file__).resolve().parent.parent
DRIFT_SD = 0.02
REQUEST_SD = 0.05
TOKENS = 24  # per request: the same for every arm (greedy, lossless)
BASE_TIME_SD = 0.5


@dataclass(frozen=True)
class World:
    arms: int = 3  # with the baseline
    rounds: int = 2
    prompts: int = 16
    startup_sd: float = 0.05
    spread: tuple[float, ...] = ()  # each speculative arm's start-up spread factor (default 1)
    prompt_sd: float = 0.2
    truth: float = 1.0  # every speculative arm's true workload speedup
    truths: tuple[float, ...] = ()  # each speculative arm's own, where given (else ``truth``)
    windows: int = 1
    repeats: int = 2
    familywise: bool = False
    # the machine drifting over a run: log speed lost per start-up slot, in the order they ran
    # (rounds in ABBA order): a drift within a round that the round's term cannot absorb whole
    slot_drift: float = 0.0
    # the log sd of a prompt's baseline time: prompts differ in length and difficulty, and the
    # window's tok/s (its tokens over its summed time) weighs each prompt's gain by its share of
    # that time: a wider spread leaves fewer effective prompts (exp(sd^2): 1.28x the variance at 0.5)
    base_time_sd: float = BASE_TIME_SD
    # the share of the prompts' log gains their copy share explains; None: no covariate, no pass,
    # and the prompts are a sample of an endless population (as before issue 81)
    covariate_r2: float | None = None
    pool: int = 164  # with a covariate: the workload file's prompts (HumanEval's 164)

    def truth_of(self, arm: int) -> float:
        """Speculative arm ``arm``'s true workload speedup (counted from 1)."""
        return self.truths[arm - 1] if 0 < arm <= len(self.truths) else self.truth

    def factor(self, arm: int) -> float:
        """Arm ``arm``'s start-up spread factor (0: the baseline)."""
        return self.spread[arm - 1] if 0 < arm <= len(self.spread) else 1.0


@dataclass
class _Regimes:
    cache: dict[tuple[int, bool], Regime] = field(default_factory=dict)

    def get(self, arms: int, familywise: bool) -> Regime:
        if (arms, familywise) not in self.cache:
            base = load_regime(ROOT / "regimes" / "cpu_default.yaml")
            ngram = base.arms[1]
            speculative = [ngram.model_copy(update={"name": f"a{i}"}) for i in range(1, arms)]
            self.cache[(arms, familywise)] = base.model_copy(
                update={
                    "arms": [base.arms[0].model_copy(update={"name": "a0"}), *speculative],
                    "exactness": Exactness(enabled=False),
                    "verdict": VerdictSettings(familywise=familywise),
                    "gates": base.gates.model_copy(update={"rules": []}),
                }
            )
        return self.cache[(arms, familywise)]


REGIMES = _Regimes()


def simulate_run(
    rng: np.random.Generator,
    world: World,
    calibration: Calibration | None = None,
    name: str = "sim",
    prompts: np.random.Generator | None = None,
) -> RawRun:
    """One run of ``world`` as raw records (arm ``a0`` is the baseline). ``prompts``: where the
    workload's prompts and their gains are drawn from (default ``rng``: a fresh sample each run); a
    generator seeded the same for every run gives every run the same prompts, as a nightly's
    workload file does."""
    drawn = rng if prompts is None else prompts
    regime = REGIMES.get(world.arms, world.familywise)
    startup = rng.normal(0.0, world.startup_sd, (world.arms, world.rounds))
    startup *= np.array([world.factor(a) for a in range(world.arms)])[:, None]
    for r in range(world.rounds):  # the slot each start-up ran in: round r's order reversed when odd
        order = range(world.arms) if r % 2 == 0 else range(world.arms - 1, -1, -1)
        for position, a in enumerate(order):
            startup[a, r] -= world.slot_drift * (r * world.arms + position)
    drift = rng.normal(0.0, DRIFT_SD, world.rounds)
    # the workload's speedup is the truth
    centres = [math.log(world.truth_of(a)) + world.prompt_sd**2 / 2 for a in range(world.arms)]
    samples: dict[int, list[RequestRecord]] = {a: [] for a in range(world.arms)}
    windows: dict[int, list[WindowRecord]] = {a: [] for a in range(world.arms)}
    workload_pass: list[RequestRecord] = []
    for w in range(world.windows):
        workload = f"w{w}"
        answers: list[tuple[list[int], list[int]]] = [([], [1] * TOKENS)] * world.prompts
        if world.covariate_r2 is None:
            base_time = drawn.lognormal(0.0, world.base_time_sd, world.prompts)
            gains = [np.ones(world.prompts)] + [
                np.exp(drawn.normal(centres[a], world.prompt_sd, world.prompts)) for a in range(1, world.arms)
            ]
            ids = [f"p{p}" for p in range(world.prompts)]
        else:
            base_time, gains, ids, answers = _sampled_from_file(drawn, world, workload, workload_pass)
        for a in range(world.arms):
            for r in range(world.rounds):
                pace = math.exp(-(startup[a, r] + drift[r]))
                for k in range(world.repeats):
                    repeat = r * world.repeats + k
                    times = base_time / gains[a] * pace * np.exp(rng.normal(0.0, REQUEST_SD, world.prompts))
                    clock = 0.0
                    for p, seconds in enumerate(times):
                        samples[a].append(
                            RequestRecord(
                                workload=workload,
                                prompt_id=ids[p],
                                concurrency=1,
                                prompt_format="raw",
                                repeat=repeat,
                                t_send=clock,
                                t_first_token=clock + 0.1 * seconds,
                                t_done=clock + seconds,
                                prompt_token_ids=answers[p][0],
                                token_ids=answers[p][1],
                            )
                        )
                        clock += float(seconds)
                    windows[a].append(
                        WindowRecord(
                            workload=workload,
                            category="code",
                            prompt_format="raw",
                            concurrency=1,
                            repeat=repeat,
                            server_start=r,
                            duration_s=clock,
                        )
                    )
    arms = {
        arm.name: RawArm(
            name=arm.name,
            status=ArmStatus(status="ok", startups_s=[1.0] * world.rounds),
            samples=samples[a],
            windows=windows[a],
            noise_floor=[],
        )
        for a, arm in enumerate(regime.arms)
    }
    if workload_pass:
        arms[regime.arms[0].name] = replace(arms[regime.arms[0].name], workload_pass=workload_pass)
    record = RunRecord(
        schema_version=SCHEMA_VERSION,
        source_path="regimes/cpu_default.yaml",
        fingerprint="simulated",
        price_per_hour=0.1,
        near_tie_margin=regime.near_tie_margin(),
        resolved_model="simulated",
        regime=regime.model_dump(mode="json"),
        workloads=[],
    )
    return RawRun(
        run=RunDir(Path("/nonexistent") / name),
        record=record,
        regime=regime,
        environment={},
        arms=arms,
        calibration=calibration,
    )


# the copy share's steps: an answer of TOKENS tokens has TOKENS - 2 3-grams
_GRAMS = TOKENS - 2


def _answer(prompt: int, copied: int) -> tuple[list[int], list[int]]:
    """A prompt and a baseline answer of ``TOKENS`` tokens whose copy share is ``copied`` / 22: the
    answer copies ``copied + 2`` tokens of its prompt in a row (``copied`` 3-grams found there), the
    rest tokens of its own."""
    own = [100_000 + prompt * TOKENS + i for i in range(TOKENS)]
    text = [10_000 + prompt * 40 + i for i in range(40)]
    if copied == 0:
        return text, own
    run = copied + 2
    return text, text[3 : 3 + run] + own[: TOKENS - run]


def _sampled_from_file(
    drawn: np.random.Generator, world: World, workload: str, workload_pass: list[RequestRecord]
) -> tuple[np.ndarray, list[np.ndarray], list[str], list[tuple[list[int], list[int]]]]:
    """A workload file of ``world.pool`` prompts, each with its baseline time, its copy share and
    every arm's gain on it (the share explaining ``covariate_r2`` of the log gains' spread; the gains
    scaled so that the file's speedup, its tokens over its summed time, is the truth); the baseline's
    answers to all of them into ``workload_pass``; the run's ``world.prompts`` sampled from the file
    (its times, gains, ids and answers)."""
    base_time = drawn.lognormal(0.0, world.base_time_sd, world.pool)
    copied = np.clip(np.rint(drawn.normal(_GRAMS / 2, _GRAMS / 5, world.pool)), 0, _GRAMS).astype(int)
    share = (copied - _GRAMS / 2) / (_GRAMS / 5)  # about standard: the population's share, scaled
    r2 = world.covariate_r2 or 0.0
    gains = [np.ones(world.pool)]
    for arm in range(1, world.arms):
        log_gain = world.prompt_sd * (
            math.sqrt(r2) * share + math.sqrt(1 - r2) * drawn.normal(0, 1, world.pool)
        )
        gain = np.exp(log_gain)
        gains.append(gain * world.truth_of(arm) * (base_time / gain).sum() / base_time.sum())
    answers = [_answer(p, int(k)) for p, k in enumerate(copied)]
    for p, (prompt, tokens) in enumerate(answers):
        workload_pass.append(
            RequestRecord(
                workload=workload,
                prompt_id=f"p{p}",
                concurrency=1,
                prompt_format="raw",
                t_done=1.0,
                prompt_token_ids=prompt,
                token_ids=tokens,
            )
        )
    chosen = drawn.choice(world.pool, world.prompts, replace=False)
    return (
        base_time[chosen],
        [g[chosen] for g in gains],
        [f"p{p}" for p in chosen],
        [answers[p] for p in chosen],
    )


def first_rounds(raw: RawRun, rounds: int, server_starts: object) -> RawRun:
    """The run as it stood after its first ``rounds`` rounds, its regime's design ``server_starts``
    (a deciding run's looks: what the runner's summary sees after each round)."""

    repeats = raw.regime.load.max_repeats()
    load = raw.regime.load.model_copy(update={"server_starts": server_starts})
    arms = {
        name: replace(
            arm,
            samples=[s for s in arm.samples if s.repeat < rounds * repeats],
            windows=[w for w in arm.windows if w.server_start < rounds],
            status=arm.status.model_copy(update={"startups_s": arm.status.startups_s[:rounds]}),
        )
        for name, arm in raw.arms.items()
    }
    return replace(raw, regime=raw.regime.model_copy(update={"load": load}), arms=arms)


def calibration_of(rng: np.random.Generator, world: World, rounds: int = 6) -> Calibration:
    """A machine calibration made by ``bench calibrate``'s model (``residual_spread``) on a run of
    ``world`` with ``rounds`` rounds and two windows."""
    from harness.derive.summary import summarize

    raw = simulate_run(rng, World(**{**world.__dict__, "rounds": rounds, "windows": 2}))
    summary = summarize(raw)
    tables = [
        {c.arm: c.startup_tok_s() for c in summary.cells if c.workload == workload}
        for workload in {c.workload for c in summary.cells}
    ]
    sd, df = residual_spread(tables)  # type: ignore[misc]
    return Calibration(
        regime_name="simulated",
        regime_fingerprint="simulated",
        machine_fingerprint="simulated",
        machine={},
        created="2026-12-06T00:00:00+00:00",
        run_id="simulated",
        rounds=rounds,
        arms=[f"a{a}" for a in range(world.arms)],
        sd=sd,
        df=df,
        cells=len(tables),
    )


def write_run(raw: RawRun, root: Path) -> Path:
    """Store a simulated run as a run directory (the files ``read_raw`` reads)."""
    root.mkdir(parents=True)
    record = raw.record.model_copy(update={"regime": raw.regime.model_dump(mode="json")})
    (root / "regime.json").write_text(record.model_dump_json())
    for name, arm in raw.arms.items():
        folder = root / "arms" / name
        folder.mkdir(parents=True)
        (folder / "status.json").write_text(arm.status.model_dump_json())
        (folder / "samples.jsonl").write_text("".join(json.dumps(r.to_json()) + "\n" for r in arm.samples))
        (folder / "windows.jsonl").write_text("".join(w.model_dump_json() + "\n" for w in arm.windows))
    return root
