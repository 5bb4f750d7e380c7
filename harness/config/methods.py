"""Every speculative method the harness knows, one row each: what an arm of it takes, what the
harness builds for it, how it drafts, and its name on each engine. The regime, both engines, the
cost model, the drafters and the findings read this table, so a method is added here (and, where an
engine needs more than its name, in that engine's adapter: docs/development.md#adding-a-method)."""

from __future__ import annotations

from dataclasses import dataclass

BASELINE = "baseline"  # one token per pass: the arm every speedup is against


@dataclass(frozen=True)
class Method:
    name: str  # as the regime writes it, and vLLM's --speculative-config "method"
    draft_model: bool  # an arm names its drafter (draft_model:); False: it takes none
    built: bool  # the harness can build the drafter itself (untrained or self-distilled)
    model_drafts: bool  # a model drafts (a drafter, or the target's own layers): its graphs can be off
    # its drafts are one chain per step, so a cost measured at K extrapolates to smaller K; False: a
    # block drafted at once (DFlash), whose cost does not
    chain: bool
    prompt_lookup: bool  # drafts by matching the prompt and output so far: no model at all
    one_k: bool  # one K everywhere: it refuses a k_schedule
    sglang: str | None  # SGLang's --speculative-algorithm; None: SGLang does not serve it
    sglang_adaptive: bool = False  # SGLang's --speculative-adaptive applies to it
    no_draft_model: str = ""  # why it takes no draft_model, said when one is given

    @property
    def label(self) -> str:
        return self.name


METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        Method("ngram", False, False, False, chain=True, prompt_lookup=True, one_k=False, sglang="NGRAM"),
        Method("suffix", False, False, False, chain=True, prompt_lookup=True, one_k=True, sglang=None),
        Method(
            "draft_model",
            True,
            False,
            True,
            chain=True,
            prompt_lookup=False,
            one_k=False,
            sglang="STANDALONE",
        ),
        Method(
            "eagle3",
            True,
            True,
            True,
            chain=True,
            prompt_lookup=False,
            one_k=False,
            sglang="EAGLE3",
            sglang_adaptive=True,
        ),
        Method("dflash", True, True, True, chain=False, prompt_lookup=False, one_k=False, sglang="DFLASH"),
        Method(
            "mtp",
            False,
            False,
            True,
            chain=True,
            prompt_lookup=False,
            one_k=False,
            sglang="NEXTN",
            no_draft_model=" (the target's own multi-token-prediction layers draft)",
        ),
    )
}


def method(name: str) -> Method | None:
    """The row of a speculative method; None for the baseline (or a name the regime refused)."""
    return METHODS.get(name)


def names(where: str) -> tuple[str, ...]:
    """The methods with a property (``Method`` field ``where`` true), in the table's order."""
    return tuple(name for name, row in METHODS.items() if getattr(row, where))
