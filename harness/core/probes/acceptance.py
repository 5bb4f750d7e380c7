"""Acceptance: tau and per-position acceptance from the engine's counters.

Definitions (vLLM's own, used by its log line and ``vllm bench serve``), over deltas of two
scrapes taken right before and right after a measured window, summed over engines/labels:

    tau (mean acceptance length) = 1 + d(accepted) / d(drafts)
    acceptance rate              = d(accepted) / d(draft_tokens)
    per-position rate_i          = d(accepted_at_position_i) / d(drafts)

What ``drafts`` counts is the engine's business, and it differs (``DRAFT_COUNTING``, recorded per
arm): vLLM's V1 model runner (the CPU build) counts a step only when the drafter proposed
something, vLLM 0.33's Model Runner V2 (the GPU default) counts every decode step as a K-token
draft, a no-match ngram step included, and SGLang counts verify steps. Model drafters (EAGLE-3,
DFlash, a draft model) propose at every step, so only ngram's tau moves with the definition.
``tokens_per_forward`` is the engine-neutral figure next to it: output tokens per forward pass
of the target, from token counts and accepted tokens alone; the speedup follows it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from harness.core.formats import inert

# How the engine counted a "draft" (tau's denominator), by the key ArmStatus.draft_counting records.
DRAFT_COUNTING = {
    "proposing_steps": "one draft per request per decode step in which the drafter proposed tokens; a step "
    "where ngram found no match is not a draft (vLLM's V1 model runner: the CPU build, and GPU runs that "
    "fall back to it)",
    "every_step": "every decode step is a K-token draft, an ngram step with no match included (filled with "
    "a dummy token, rejected): vLLM 0.33's Model Runner V2, the GPU default. The same outputs give ngram a "
    "lower tau than under proposing_steps",
    "verify_steps": "one draft per verify step of each request (SGLang's spec_verify_ct); SGLang's NGRAM "
    "keeps one corpus across requests (reset by /flush_cache), so a window's drafts depend on earlier "
    "requests",
}
TOKENS_PER_FORWARD = (
    "output tokens per forward pass of the target after each request's first token: (output - requests) / "
    "decode steps, the steps being the larger of two counts that can only fall short: (output - requests) - "
    "accepted (each step emits one token of its own plus the drafts it accepted; drafts accepted past a "
    "request's stop are counted, never output) and the streamed chunks that carried tokens (one per step; "
    "an engine may merge steps for a slow reader). The same on every engine whatever it calls a draft "
    "(1 for the baseline)"
)


def tokens_per_forward(
    output_tokens: int, requests: int, accepted_tokens: float, streamed_steps: int | None = None
) -> float | None:
    """``TOKENS_PER_FORWARD``; ``streamed_steps``: chunks with tokens after each request's first."""
    decoded = output_tokens - requests  # the first token of each request comes from its prefill
    steps = max(decoded - accepted_tokens, streamed_steps or 0)
    if decoded <= 0 or steps <= 0:
        return None
    return decoded / steps


ACCEPTED_PAST_STOP = (
    "drafts the engine's counters accepted past a request's stop (its max_tokens or a stop token): "
    "counted in tau, never output. A verify step accepts its drafts before the stop is checked, so a "
    "request's last step can count up to K of them. At least the accepted drafts less those the "
    "stream shows were output (each decode step's chunk carries its own token plus the drafts it "
    "accepted); exact when every step streamed its own chunk, at most K per request"
)


def accepted_past_stop(
    output_tokens: int, requests: int, accepted_tokens: float, streamed_steps: int
) -> float | None:
    """``ACCEPTED_PAST_STOP``, at least: ``accepted_tokens`` (the counters') less the accepted
    drafts that were output, (output - requests) - ``streamed_steps``. None: nothing accepted."""
    if accepted_tokens <= 0 or requests <= 0:
        return None
    output_accepted = (output_tokens - requests) - streamed_steps
    return max(0.0, accepted_tokens - output_accepted)


def histogram_counters(steps: float, proposed: float, accepted: float, histogram: list[int]) -> SpecCounters:
    """One request's own acceptance in the counters' quantities (SGLang's spec details, vLLM 0.33's
    per-request metrics): drafts = its verify steps, and per position from its histogram of
    accepted drafts per step (entry j: the steps that accepted exactly j drafts, i.e. positions
    0..j-1)."""
    per_position: dict[int, float] = {}
    for correct, count in enumerate(histogram):
        for position in range(correct):
            per_position[position] = per_position.get(position, 0.0) + count
    return SpecCounters(
        drafts=float(steps),
        draft_tokens=float(proposed),
        accepted_tokens=float(accepted),
        accepted_per_position=per_position,
    )


def streamed_steps(chunks: list[tuple[float, int, str]]) -> int:
    """A request's decode steps as streamed: its chunks that carried tokens, less the first (the
    prefill's token)."""
    return max(0, sum(1 for _, tokens, _ in chunks if tokens > 0) - 1)


_SAMPLE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


def parse_prometheus(text: str) -> list[Sample]:
    """Samples of a Prometheus text exposition (comments and malformed lines skipped)."""
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if not match:
            continue
        try:
            value = float(match["value"])
        except ValueError:
            continue
        labels = dict(_LABEL.findall(match["labels"] or ""))
        samples.append(Sample(match["name"], labels, value))
    return samples


# the label vLLM and SGLang put on every sample with the model it counts for (the served name)
MODEL_LABEL = "model_name"


def _label_value(escaped: str) -> str:
    """A label value as written in the exposition, its escapes (backslash, quote, newline) undone."""
    return re.sub(r"\\(.)", lambda m: "\n" if m[1] == "n" else m[1], escaped)


def served_samples(text: str, model: str) -> tuple[str, list[str]]:
    """The exposition ``text`` with only the samples of the served ``model`` (and those without a
    model label, as every engine's own are where it serves one model), and the other models' names
    it counts too: a server whose /metrics also count another model (a second deployment behind one
    router, a gateway's sum) would add that model's drafts and tokens to this one's. Names are
    compared inert, as the served model's id is read (``ExternalServer``)."""
    kept, others = [], set()
    for line in text.splitlines():
        match = _SAMPLE.match(line) if line and not line.startswith("#") else None
        labels = dict(_LABEL.findall(match["labels"] or "")) if match else {}
        if MODEL_LABEL in labels:
            named = inert(_label_value(labels[MODEL_LABEL]))
            if named != model:
                others.add(named)
                continue
        kept.append(line)
    return "\n".join(kept) + "\n", sorted(others)


@dataclass(frozen=True)
class SpecCounters:
    """Cumulative speculative-decoding counters at one instant (all zero for a no-spec server)."""

    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted_tokens: float = 0.0
    accepted_per_position: dict[int, float] = field(default_factory=dict)
    # the engine's steps so far, speculative or not (vLLM: the observations of its tokens-per-step
    # histogram, one per engine step that produced output): a window's delta is its step count,
    # whose time the cost model divides (harness.derive.cost_model). None: the engine does not say
    engine_steps: float | None = None

    def minus(self, before: SpecCounters) -> SpecCounters:
        positions = sorted(set(self.accepted_per_position) | set(before.accepted_per_position))
        steps = (
            None
            if self.engine_steps is None or before.engine_steps is None
            else self.engine_steps - before.engine_steps
        )
        return SpecCounters(
            engine_steps=steps,
            drafts=self.drafts - before.drafts,
            draft_tokens=self.draft_tokens - before.draft_tokens,
            accepted_tokens=self.accepted_tokens - before.accepted_tokens,
            accepted_per_position={
                p: self.accepted_per_position.get(p, 0.0) - before.accepted_per_position.get(p, 0.0)
                for p in positions
            },
        )

    def fallen(self, before: SpecCounters) -> list[str]:
        """The counters lower now than ``before``, each as "NAME fell from A to B": a cumulative
        counter never falls, so its server restarted or reset them in between, and a delta across it
        is no count of anything (read as one, it is "the counters since the restart")."""
        pairs = [
            (n, getattr(before, n), getattr(self, n)) for n in ("drafts", "draft_tokens", "accepted_tokens")
        ]
        if before.engine_steps is not None and self.engine_steps is not None:
            pairs.append(("engine_steps", before.engine_steps, self.engine_steps))
        positions = sorted(set(before.accepted_per_position) | set(self.accepted_per_position))
        pairs += [
            (
                f"accepted_per_position[{p}]",
                before.accepted_per_position.get(p, 0.0),
                self.accepted_per_position.get(p, 0.0),
            )
            for p in positions
        ]
        return [f"{name} fell from {was:,.0f} to {now:,.0f}" for name, was, now in pairs if now < was]

    def plus(self, other: SpecCounters) -> SpecCounters:
        """Two windows' deltas together (the repeats of one window); the engine steps are summed by
        whoever needs them (``harness.derive.cost_model``): a window without them is not zero steps."""
        positions = sorted(set(self.accepted_per_position) | set(other.accepted_per_position))
        return SpecCounters(
            drafts=self.drafts + other.drafts,
            draft_tokens=self.draft_tokens + other.draft_tokens,
            accepted_tokens=self.accepted_tokens + other.accepted_tokens,
            accepted_per_position={
                p: self.accepted_per_position.get(p, 0.0) + other.accepted_per_position.get(p, 0.0)
                for p in positions
            },
        )

    def to_json(self) -> dict:
        steps = {} if self.engine_steps is None else {"engine_steps": self.engine_steps}
        return steps | {
            "drafts": self.drafts,
            "draft_tokens": self.draft_tokens,
            "accepted_tokens": self.accepted_tokens,
            "accepted_per_position": {str(p): v for p, v in sorted(self.accepted_per_position.items())},
        }

    @classmethod
    def from_json(cls, data: dict) -> SpecCounters:
        return cls(
            drafts=data["drafts"],
            draft_tokens=data["draft_tokens"],
            accepted_tokens=data["accepted_tokens"],
            accepted_per_position={int(p): v for p, v in data["accepted_per_position"].items()},
            engine_steps=data.get("engine_steps"),  # absent before the cost model (version 14)
        )


@dataclass(frozen=True)
class Acceptance:
    tau: float | None  # None: no step speculated in the window, so there is nothing to measure
    acceptance_rate: float | None
    per_position: list[float]  # rate at draft position 0, 1, ...
    drafts: float
    draft_tokens: float
    accepted_tokens: float


def mean_acceptance_length(drafts: float, accepted_tokens: float) -> float | None:
    """tau = 1 + accepted / drafts; None when nothing was drafted (nothing to measure)."""
    return 1.0 + accepted_tokens / drafts if drafts > 0 else None


def conditional_rates(marginal: list[float]) -> list[float | None]:
    """Per-position acceptance, conditional: P(position i accepted | positions < i accepted) =
    marginal_i / marginal_(i-1) (position 0's is its marginal; None after a position nothing got
    past). vLLM's per-position counters are marginal: position i counts the drafts whose first i + 1
    tokens were all accepted. The two are easily confused (NVIDIA's SPEED-Bench reports both)."""
    rates: list[float | None] = []
    for i, rate in enumerate(marginal):
        before = 1.0 if i == 0 else marginal[i - 1]
        rates.append(rate / before if before > 0 else None)
    return rates


def length_histogram(marginal: list[float], drafts: float) -> dict[int, float]:
    """Drafts by the tokens their step emitted (1 + the drafts accepted: 1 to K + 1), from the
    marginal per-position rates: a step emits exactly j + 1 when positions < j were accepted and
    position j was not, P = marginal[j - 1] - marginal[j] (marginal[-1] = 1, marginal[K] = 0).
    specdec_bench's ``Acceptance_Length_Histogram`` counted from the counters."""
    rates = [1.0, *marginal, 0.0]
    return {j + 1: drafts * (rates[j] - rates[j + 1]) for j in range(len(marginal) + 1)}


def counter_breaks(
    before: SpecCounters | None,
    after: SpecCounters | None,
    generated_before: float | None,
    generated_after: float | None,
    own_tokens: int,
) -> list[str]:
    """Why a window's counter scrapes cannot be trusted, if they cannot: a counter that fell (a
    restart or a reset between the scrapes), or a server whose generated-token counter grew by less
    than the window's own requests received (it was reset, or it counts something else). Empty: the
    scrapes are a count of the window."""
    found = after.fallen(before) if before is not None and after is not None else []
    if generated_before is not None and generated_after is not None:
        grew = generated_after - generated_before
        if grew < 0:
            found.append(f"generated tokens fell from {generated_before:,.0f} to {generated_after:,.0f}")
        elif grew < own_tokens:
            found.append(
                f"generated tokens grew by {grew:,.0f}, fewer than the window's own {own_tokens:,} "
                f"(from {generated_before:,.0f} to {generated_after:,.0f})"
            )
    return found


# counters are integers summed over the window; their ratios agree to float rounding
CONSISTENCY_TOLERANCE = 1e-6


def request_sum_problem(counters: SpecCounters, requests: SpecCounters) -> str | None:
    """The window counters against the sum of the requests' own acceptance (the engine reports
    both at the same verify steps): a difference means a scrape missed steps or other requests ran."""
    for name in ("drafts", "accepted_tokens"):
        mine, theirs = getattr(requests, name), getattr(counters, name)
        if abs(mine - theirs) > CONSISTENCY_TOLERANCE * max(1.0, theirs):
            return f"the requests' own {name} ({mine:g}) differ from the server's counters ({theirs:g})"
    return None


def acceptance_problems(tau: float | None, marginal: list[float]) -> list[str]:
    """The two checks every cell's counters must pass (SPEED-Bench's): tau = 1 + the sum of the
    marginal per-position rates (the accepted tokens are the per-position acceptances summed), and
    the marginals never rise with the position (a draft's token i + 1 is accepted only after its
    token i). A failure means the counters do not describe one set of drafts: a scrape that missed
    the last step's counters, or an engine that counts otherwise."""
    if tau is None or not marginal:
        return []
    problems = []
    if tau < 1 or min(marginal) < 0:
        problems.append("a counter went down between the window's scrapes (a negative delta)")
    total = 1 + sum(marginal)
    if abs(tau - total) > CONSISTENCY_TOLERANCE * max(1.0, tau):
        problems.append(f"tau {tau:.4f} is not 1 + the sum of the per-position rates ({total:.4f})")
    for i in range(1, len(marginal)):
        before, after = marginal[i - 1], marginal[i]
        if after > before + CONSISTENCY_TOLERANCE:
            problems.append(
                f"the per-position rate rises from position {i - 1} to {i} ({before:.3f} -> {after:.3f})"
            )
    return problems


def acceptance(delta: SpecCounters) -> Acceptance:
    """Acceptance metrics from a window's counter delta (see the module docstring)."""
    drafts = delta.drafts
    per_position = (
        [delta.accepted_per_position[p] / drafts for p in sorted(delta.accepted_per_position)]
        if drafts
        else []
    )
    return Acceptance(
        tau=mean_acceptance_length(drafts, delta.accepted_tokens),
        acceptance_rate=delta.accepted_tokens / delta.draft_tokens if delta.draft_tokens > 0 else None,
        per_position=per_position,
        drafts=drafts,
        draft_tokens=delta.draft_tokens,
        accepted_tokens=delta.accepted_tokens,
    )
