"""The decode floor (harness/derive/ceiling.py) against a hand computation."""

from __future__ import annotations

import pytest

from harness.derive.ceiling import floor_step_ms


def test_the_floor_is_the_bytes_read_over_the_bandwidth() -> None:
    # 1 GB of weights + 100 kB/token x 10,000 tokens = 2e9 bytes; at 1,000 GB/s that is 2 ms
    assert floor_step_ms(1e9, 1e5, 10_000, 1000.0) == pytest.approx(2.0)
    # split over two GPUs, each reading its half at 1,000 GB/s
    assert floor_step_ms(1e9, 1e5, 10_000, 1000.0, tensor_parallel=2) == pytest.approx(1.0)
    # no context: the weights alone
    assert floor_step_ms(1e9, 1e5, 0, 1000.0) == pytest.approx(1.0)


def test_an_8b_model_on_an_h200() -> None:
    # Qwen3-8B-like in bfloat16: 8.19e9 parameters x 2 bytes; KV 2 x 36 layers x 8 heads x 128 x 2
    # = 147,456 bytes/token; 4,096 tokens of context; 4,800 GB/s
    weights, kv = 8.19e9 * 2, 2 * 36 * 8 * 128 * 2
    by_hand = (16.38e9 + 147_456 * 4096) / 4.8e12 * 1e3
    assert kv == 147_456
    assert floor_step_ms(weights, kv, 4096, 4800.0) == pytest.approx(by_hand)
    assert by_hand == pytest.approx(3.5383, abs=1e-4)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((1e9, 1e5, 10, 0.0, 1), "bandwidth_gb_s must be positive"),
        ((1e9, 1e5, 10, 100.0, 0), "tensor_parallel must be at least 1"),
        ((-1.0, 1e5, 10, 100.0, 1), "must not be negative"),
        ((1e9, 1e5, -10, 100.0, 1), "must not be negative"),
    ],
)
def test_impossible_inputs_are_refused(args: tuple, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        floor_step_ms(*args)
