"""``runner.kv_cache``: a dynamic cache grows by concatenation, a static one writes into its
preallocated buffers; both give attention the same keys and values."""

from __future__ import annotations

import pytest
import torch

from runner.kv_cache import KVCache


def _kv(t: int, start: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(B=1, Hkv=2, T, D=3) keys numbered from ``start``, values their negatives."""
    k = torch.arange(start, start + 2 * t * 3).reshape(1, 2, t, 3)
    return k, -k


@pytest.mark.parametrize("kind", ["dynamic", "static"])
def test_appends_give_the_whole_cache(kind: str) -> None:
    cache = KVCache(kind, max_len=6)
    prompt, token = _kv(4, 0.0), _kv(1, 100.0)
    cache.append(*prompt)
    k, v = cache.append(*token)
    assert cache.length == 5 and k.shape == v.shape == (1, 2, 5, 3)
    assert torch.equal(k, torch.cat([prompt[0], token[0]], dim=2)) and torch.equal(v, -k)


def test_a_static_cache_keeps_its_buffers_and_a_dynamic_one_lets_go() -> None:
    static, dynamic = KVCache("static", max_len=6), KVCache("dynamic", max_len=6)
    static.append(*_kv(2, 0.0))
    dynamic.append(*_kv(2, 0.0))
    buffer = static.k
    assert buffer is not None and buffer.shape == (1, 2, 6, 3)  # preallocated to max_len
    static.reset()
    dynamic.reset()
    assert (static.length, dynamic.length) == (0, 0) and static.k is buffer and dynamic.k is None
    k, _ = static.append(*_kv(1, 7.0))  # after a reset, position 0 again
    assert torch.equal(k, _kv(1, 7.0)[0]) and k.data_ptr() == buffer.data_ptr()


def test_a_dynamic_append_copies_the_cache_into_a_new_tensor() -> None:
    cache = KVCache("dynamic", max_len=4)
    first, _ = cache.append(*_kv(2, 0.0))
    second, _ = cache.append(*_kv(1, 50.0))
    assert second.data_ptr() != first.data_ptr() and torch.equal(second[:, :, :2], first)


@pytest.mark.parametrize("kind", ["dynamic", "static"])
def test_a_full_cache_refuses_more(kind: str) -> None:
    cache = KVCache(kind, max_len=3)
    cache.append(*_kv(3, 0.0))
    with pytest.raises(RuntimeError, match="KV cache full: 4 positions, made for 3"):
        cache.append(*_kv(1, 9.0))
    assert cache.length == 3
