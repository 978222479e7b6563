"""``analysis.opnames``: one name per op whatever the trace's spelling (SGLang's run counter dropped,
a serving GEMM wrapper read as ``aten::linear``, an Inductor kernel as the op it stands for), and the
serving core and KV-write tests built on it. Each name below is written by hand from the engines'
naming schemes (``sglang_profiler::<module>_<function>_<counter>``, ``triton_<kind>_fused_<origins>_<n>``)."""

from __future__ import annotations

import pytest

from tb_attn_plugin.analysis.ops.opnames import canonical, is_serving_core, is_serving_kv_write
from tb_attn_plugin.vocab.aten import LINEAR_OP
from tb_attn_plugin.vocab.kernels import INDUCTOR_LAYOUT_OP, INDUCTOR_NORM_OP
from tb_attn_plugin.vocab.serving import SERVING_CORE_OPS, SERVING_GEMM_OPS, SERVING_KV_WRITE_OPS


@pytest.mark.parametrize(("name", "read"), [
    ("sglang_profiler::utils_apply_qk_norm_3", "sglang_profiler::utils_apply_qk_norm"),
    ("sglang_profiler::attention_paged_attention_ragged_100", "sglang_profiler::attention_paged_attention_ragged"),
    ("sglang_profiler::a_1_2", "sglang_profiler::a_1"),  # only the last counter is the run's
    ("sglang_profiler::x_12a", "sglang_profiler::x_12a"),  # not digits to the end: no counter
    ("sglang_profiler::x_", "sglang_profiler::x_"),  # an underscore without digits
    ("sglang_profiler::foo", "sglang_profiler::foo"),  # already without one
])
def test_sglangs_run_counter_is_dropped_and_nothing_else(name: str, read: str) -> None:
    assert canonical(name) == read


def test_a_counter_is_dropped_only_under_sglangs_prefix() -> None:
    assert canonical("aten::foo_12") == "aten::foo_12"
    assert canonical("my_op_3") == "my_op_3"


def test_serving_gemm_wrappers_read_as_linear() -> None:
    assert SERVING_GEMM_OPS  # the rule below checks something
    for name in SERVING_GEMM_OPS:
        assert canonical(name) == LINEAR_OP


@pytest.mark.parametrize(("name", "read"), [
    ("triton_tem_fused_addmm_0", LINEAR_OP),  # a template over a GEMM: a projection, epilogue fused
    ("triton_poi_fused_cat_transpose_view_10", INDUCTOR_LAYOUT_OP),  # only layout
    ("triton_per_fused_mean_rsqrt_2", INDUCTOR_NORM_OP),  # an RMSNorm's pieces
    ("triton_poi_fused_gelu_3", "triton_poi_fused_gelu_3"),  # an origin no rule reads: kept as it is
])
def test_inductor_kernels_read_as_the_op_they_stand_for(name: str, read: str) -> None:
    assert canonical(name) == read


def test_the_sglang_rule_comes_before_the_inductor_one() -> None:
    """A profiler range whose function happens to look like a kernel loses its counter only."""
    assert canonical("sglang_profiler::triton_tem_fused_addmm_0") == "sglang_profiler::triton_tem_fused_addmm"


def test_plain_names_and_the_empty_name_are_unchanged() -> None:
    for name in ("aten::linear", "aten::scaled_dot_product_attention", "vllm::unified_attention", ""):
        assert canonical(name) == name


def test_serving_cores_with_and_without_a_counter() -> None:
    assert is_serving_core("vllm::unified_attention_with_output")
    assert is_serving_core("sglang::unified_attention_with_output")
    assert is_serving_core("sglang_profiler::mha__mha_batch_prefill_167")  # SGLang's aiter prefill, counted
    assert is_serving_core("sglang_profiler::decode_attention_decode_attention_fwd_grouped_4")
    assert all(is_serving_core(n) for n in SERVING_CORE_OPS)
    for name in ("aten::scaled_dot_product_attention", "sglang_profiler::utils_apply_qk_norm_3",
                 "vllm::unified_kv_cache_update", "", "sglang_profiler::mha__mha_batch_prefill_x"):
        assert not is_serving_core(name), name


def test_serving_kv_writes_with_and_without_a_counter() -> None:
    assert is_serving_kv_write("sglang_profiler::memory_pool__set_kv_buffer_impl_7")
    assert is_serving_kv_write("_C_cache_ops::reshape_and_cache_flash")
    assert all(is_serving_kv_write(n) for n in SERVING_KV_WRITE_OPS)
    for name in ("vllm::unified_attention_with_output", "aten::copy_", "aten::index_put_", ""):
        assert not is_serving_kv_write(name), name
    assert not SERVING_CORE_OPS & SERVING_KV_WRITE_OPS  # one op is never both
