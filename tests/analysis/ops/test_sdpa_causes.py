"""Why SDPA fell back to math (``analysis.sdpa_causes``): each rule against PyTorch's dispatch, as
probed on CPU with torch 2.13 (dropout, 3-D inputs and a value head dimension of its own fall
back; masks, GQA, odd head dimensions and bf16 do not) and as documented for CUDA."""

from __future__ import annotations

from tb_attn_plugin.analysis.ops.sdpa_causes import SdpaCall, causes

Q = [2, 8, 128, 64]


def _call(**kw: object) -> SdpaCall:
    base: dict[str, object] = {"q": Q, "k": Q, "v": Q, "mask": None, "dtype": "float", "dropout_p": 0.0,
                               "enable_gqa": False}
    return SdpaCall(**{**base, **kw})  # type: ignore[arg-type]


def _keys(calls: list[SdpaCall], cuda: bool, pinned: bool = False) -> list[str]:
    return [c.key for c in causes(calls, cuda=cuda, pinned=pinned)]


def test_cpu_causes() -> None:
    assert _keys([_call()], cuda=False) == []
    assert _keys([_call(dropout_p=0.1)], cuda=False) == ["dropout"]
    assert _keys([_call(q=[8, 128, 64], k=[8, 128, 64], v=[8, 128, 64])], cuda=False) == ["rank"]
    assert _keys([_call(v=[2, 8, 128, 32])], cuda=False) == ["value-dim"]
    # Not causes on CPU: its flash kernel takes masks, GQA, any head dimension and fp32.
    assert _keys([_call(mask=[128, 128], enable_gqa=True, q=[2, 8, 128, 12], k=[2, 2, 128, 12],
                        v=[2, 2, 128, 12])], cuda=False) == []
    (dropout,) = causes([_call(dropout_p=0.1), _call(dropout_p=0.1)], cuda=False)
    assert dropout.text == "dropout_p 0.1 (training): the CPU flash kernel takes no dropout"
    assert "on CUDA flash and efficient apply dropout" in dropout.fix


def test_cuda_causes_name_the_kernels_they_rule_out() -> None:
    assert _keys([_call(dtype="c10::BFloat16")], cuda=True) == []
    assert _keys([_call(dropout_p=0.1, dtype="c10::Half")], cuda=True) == []  # flash applies dropout
    # fp32 rules out flash and cuDNN, GQA the efficient kernel: together, math.
    found = causes([_call(enable_gqa=True, k=[2, 2, 128, 64], v=[2, 2, 128, 64])], cuda=True)
    assert [c.key for c in found] == ["fp32", "gqa"]
    assert "flash and cuDNN need fp16 or bf16" in found[0].text and "efficient kernel takes none" in found[1].text
    assert _keys([_call(mask=[2, 1, 128, 128], q=[2, 8, 128, 72], k=[2, 8, 128, 72], v=[2, 8, 128, 72],
                        dtype="c10::Half")], cuda=True) == ["mask"]
    (head,) = causes([_call(q=[2, 8, 128, 300], k=[2, 8, 128, 300], v=[2, 8, 128, 300], dtype="c10::Half")],
                     cuda=True)
    assert head.key == "head-dim" and "300 is above 256" in head.text
    assert "not a multiple of 8" in causes([_call(q=[2, 8, 128, 60], dtype="c10::Half")], cuda=True)[0].text


def test_a_pin_is_a_cause_and_nothing_recorded_is_none() -> None:
    assert _keys([_call()], cuda=False, pinned=True) == ["pinned"]
    blank = SdpaCall(q=None, k=None, v=None, mask=None, dtype=None, dropout_p=None, enable_gqa=None)
    assert _keys([blank], cuda=True) == [] and _keys([blank], cuda=False) == []
