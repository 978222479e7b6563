"""The op names the analysis recognises: every set of ATen (and compiled-region) op names, once.

Each set is named for what its members have in common in a trace, not for the module that
reads it, and where two sets look alike the comment says why they differ. PyTorch's own kernel
names are not here: the backend rules match them by substring (``analysis.backend``); the kernels
of attention libraries and serving engines are, as the substrings that name them. The decoder's own list
of ops whose shapes it keeps, ``trace.kineto.SHAPE_OPS``, stays in ``trace/`` (``trace`` does
not import ``analysis``); ``tests/analysis/test_ops.py`` checks that it holds every op whose
shapes are read here.
"""

# Not split (over 400 lines): every op-name set in one place is the point; its seam, a package by
# family (core, projections, cache, serving, graphs), waits until a family grows.

from __future__ import annotations

__all__ = [
    "ADDMM_OP",
    "ARANGE_OP",
    "ARITHMETIC_OPS",
    "ATEN_PREFIX",
    "CAT_OP",
    "CLONE_OP",
    "COMPARE_OPS",
    "COMPILED_GRAPH_PREFIX",
    "COMPILED_REGION_OPS",
    "COMPILED_REGION_PREFIX",
    "COMPILE_BOOKKEEPING_PREFIXES",
    "COMPOSITE_OPS",
    "CONTIGUOUS_OP",
    "COPY_OPS",
    "DROPOUT_OPS",
    "DTYPE_CONVERT_OPS",
    "EFFICIENT_FORWARD_OP",
    "ELEMENTWISE_OPS",
    "ELU_OPS",
    "EMBEDDING_OP",
    "EXP_OPS",
    "FILL_OPS",
    "FLASH_FORWARD_OP",
    "FLEX_EAGER_OP",
    "FUSED_BLOCK_OPS",
    "GEMM_OPS",
    "INPLACE_COPY_OP",
    "INT_MATMUL_ARGS",
    "INT_MM_OP",
    "KERNEL_BACKWARD_OPS",
    "KERNEL_FORWARD_OPS",
    "KV_CACHE_OPS",
    "KV_EXPAND_OPS",
    "LAYOUT_OPS",
    "LINEAR_OP",
    "MASKED_FILL_OPS",
    "MASKED_SOFTMAX_OP",
    "MASK_BUILD_OPS",
    "MASK_MAKING_OPS",
    "MASK_OPS",
    "MATMUL_ARGS",
    "MATMUL_INPUT_COPY_OPS",
    "MATMUL_OPS",
    "MATMUL_WRAPPER_OPS",
    "MM_OP",
    "NATIVE_DROPOUT_OP",
    "NATIVE_MHA_NEED_WEIGHTS_ARG",
    "NATIVE_MHA_OP",
    "NEG_OP",
    "NORM_OPS",
    "NORM_PIECE_OPS",
    "NO_TRAFFIC_OPS",
    "POSITION_BIAS_OPS",
    "PROJECTION_OPS",
    "QKV_TRANSFORM_OP",
    "ROPE_OPS",
    "ROTATION_JOIN",
    "ROTATION_OPS",
    "SAFE_SOFTMAX_OP",
    "SCALE_OPS",
    "SDPA_BACKWARD",
    "SDPA_CPU_FLASH_OP",
    "SDPA_CUDNN_OP",
    "SDPA_EFFICIENT_OP",
    "SDPA_FLASH_OP",
    "SDPA_FORWARD",
    "SDPA_MATH_OP",
    "SDPA_OP",
    "SDPA_OPS",
    "SDPA_OVERRIDEABLE_OP",
    "SHAPE_OPS",
    "SOFTMAX_OPS",
    "TENSOR_NEW_OPS",
    "TRANSPOSE_OPS",
    "TRIANGLE_OPS",
    "UNSQUEEZE_OPS",
]

# -- scaled dot-product attention ------------------------------------------------------------

#: ``F.scaled_dot_product_attention``: it dispatches to one of the ops below, nested inside it.
SDPA_OP = "aten::scaled_dot_product_attention"
#: The unfused backend: about 20 ops (matmuls, ``_safe_softmax``) and materialized scores.
SDPA_MATH_OP = "aten::_scaled_dot_product_attention_math"
SDPA_FLASH_OP = "aten::_scaled_dot_product_flash_attention"
SDPA_CPU_FLASH_OP = "aten::_scaled_dot_product_flash_attention_for_cpu"
SDPA_EFFICIENT_OP = "aten::_scaled_dot_product_efficient_attention"
SDPA_CUDNN_OP = "aten::_scaled_dot_product_cudnn_attention"
SDPA_OVERRIDEABLE_OP = "aten::_scaled_dot_product_fused_attention_overrideable"
#: The kernels' own ops, which the fused SDPA ops call on CUDA.
FLASH_FORWARD_OP = "aten::_flash_attention_forward"
EFFICIENT_FORWARD_OP = "aten::_efficient_attention_forward"
KERNEL_FORWARD_OPS = frozenset({FLASH_FORWARD_OP, EFFICIENT_FORWARD_OP})

#: Fused SDPA forward ops: name -> index of ``is_causal`` in the op's arguments (for FLOPs).
SDPA_FORWARD: dict[str, int] = {
    SDPA_FLASH_OP: 4,  # (q, k, v, dropout_p, is_causal, ...)
    SDPA_CPU_FLASH_OP: 4,  # (q, k, v, dropout_p, is_causal, ...)
    SDPA_EFFICIENT_OP: 6,  # (q, k, v, bias, lse, dropout_p, is_causal, ...)
    SDPA_CUDNN_OP: 6,  # (q, k, v, bias, lse, dropout_p, is_causal, ...)
    SDPA_OVERRIDEABLE_OP: 5,  # (q, k, v, bias, dropout_p, is_causal, ...)
}
#: Fused SDPA backward ops: name -> (index of q, index of ``is_causal``).
SDPA_BACKWARD: dict[str, tuple[int, int]] = {
    # (grad_out, q, k, v, out, lse, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, ...)
    "aten::_scaled_dot_product_flash_attention_backward": (1, 11),
    # (grad_out, q, k, v, out, lse, dropout_p, is_causal, attn_mask, scale)
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": (1, 7),
    # (grad_out, q, k, v, bias, out, lse, seed, offset, dropout_p, grad_input_mask, is_causal, scale)
    "aten::_scaled_dot_product_efficient_attention_backward": (1, 11),
    # (grad_out, q, k, v, out, lse, seed, offset, bias, cum_q, cum_k, max_q, max_k, dropout_p, is_causal, ...)
    "aten::_scaled_dot_product_cudnn_attention_backward": (1, 14),
}
#: The backward ops of the kernels' own forward ops above.
KERNEL_BACKWARD_OPS = frozenset({"aten::_flash_attention_backward", "aten::_efficient_attention_backward"})
#: Every SDPA entry point, fused or not: one of them is one attention call, with (q, k, v, mask)
#: as its first inputs.
SDPA_OPS = frozenset({SDPA_OP, SDPA_MATH_OP, *SDPA_FORWARD})

#: What ``torch.compile`` leaves of attention in a trace: no ATen attention op, only the region.
#: The region's event is ``Torch-Compiled Region: <frame>/<recompile>`` in recent PyTorch.
COMPILED_REGION_OPS = frozenset({"CompiledFunction", "Torch-Compiled Region"})
COMPILED_REGION_PREFIX = "Torch-Compiled Region"
#: Inductor's annotation around a compiled graph's call: ``## Call CompiledFxGraph <hash> ##``.
COMPILED_GRAPH_PREFIX = "## Call CompiledFxGraph"
#: Dynamo's and AOTAutograd's own events around a compiled region's call: bookkeeping, not the
#: model's ops.
COMPILE_BOOKKEEPING_PREFIXES = ("TorchDynamo Cache Lookup", "Pregraph bytecode", "AOTDispatcher",
                                COMPILED_GRAPH_PREFIX, "CompiledFunction")
#: ``flex_attention``'s autograd function, seen only on its eager (unfused reference) path.
FLEX_EAGER_OP = "FlexAttentionAutogradOp"

# -- hand-written attention, phase by phase -----------------------------------------------------

#: ``special_softmax`` is ``torch.special.softmax``: a top-level op in its own right (inference
#: looks at top-level ops), with ``aten::softmax`` inside it. ``_masked_softmax`` masks and
#: normalizes in one op (nn.MultiheadAttention's fast path with a mask).
SOFTMAX_OPS = frozenset({"aten::softmax", "aten::_softmax", "aten::_safe_softmax", "aten::special_softmax",
                         "aten::_masked_softmax"})
#: The math backend's softmax, which also rewrites fully masked rows.
SAFE_SOFTMAX_OP = "aten::_safe_softmax"
#: The 2-D GEMM: before the attention core a projection, within it q·kᵀ or probs·v.
MM_OP = "aten::mm"
#: Ops that each run one GEMM and write its output (a new tensor).
GEMM_OPS = frozenset({MM_OP, "aten::bmm", "aten::addmm", "aten::baddbmm"})
#: Composite matmuls: they reshape, and may copy, their inputs before calling a GEMM op.
MATMUL_WRAPPER_OPS = frozenset({"aten::matmul", "aten::einsum"})
#: The matmuls of q·kᵀ and probs·v. Not ``addmm``: that is a projection's (``linear`` with bias).
MATMUL_OPS = MATMUL_WRAPPER_OPS | (GEMM_OPS - {"aten::addmm"})
#: Where the two operands of a matmul are among its inputs (``addmm``/``baddbmm`` take a bias
#: first); the key set is the matmuls with a FLOP formula.
MATMUL_ARGS: dict[str, tuple[int, int]] = {
    "aten::mm": (0, 1), "aten::bmm": (0, 1), "aten::matmul": (0, 1), "aten::addmm": (1, 2), "aten::baddbmm": (1, 2),
}
#: Integer GEMMs (int8 in, int32 out): counted as integer ops (IOPs), apart from FLOPs; the
#: operands' positions as in ``MATMUL_ARGS``.
INT_MATMUL_ARGS: dict[str, tuple[int, int]] = {"aten::_int_mm": (0, 1)}
INT_MM_OP = "aten::_int_mm"
#: Linear attention's feature maps: ``elu(x) + 1`` (linear-elu), and Performer's ``exp`` of a
#: random projection.
ELU_OPS = frozenset({"aten::elu", "aten::elu_"})
EXP_OPS = frozenset({"aten::exp", "aten::exp_"})
#: ``nn.Linear``: (x, weight[, bias]).
LINEAR_OP = "aten::linear"
#: The q/k/v and output projections (``mm`` only around the core: see ``MM_OP``).
ADDMM_OP = "aten::addmm"
PROJECTION_OPS = frozenset({LINEAR_OP, ADDMM_OP, MM_OP})
SCALE_OPS = frozenset({"aten::mul", "aten::div", "aten::mul_", "aten::div_"})
#: Filling masked scores with -inf: the mask op whose shapes tell the scores' size.
MASKED_FILL_OPS = frozenset({"aten::masked_fill", "aten::masked_fill_"})
#: Applying a mask to the scores (HF GPT-2 adds it, or selects with ``where``).
MASK_OPS = MASKED_FILL_OPS | {"aten::where", "aten::add", "aten::add_", "aten::tril", "aten::triu"}
#: ``native_dropout`` returns the dropped tensor and a bool mask (``aten::dropout`` draws float
#: noise into a new tensor, then multiplies).
NATIVE_DROPOUT_OP = "aten::native_dropout"
DROPOUT_OPS = frozenset({"aten::dropout", NATIVE_DROPOUT_OP, "aten::feature_dropout"})

#: Element-wise ops on attention's tensors, whose shapes give the bytes they move
#: (``analysis.traffic``): scaling and masking the scores, scaling q and k in the math backend,
#: rotary products.
ELEMENTWISE_OPS = SCALE_OPS | MASKED_FILL_OPS | frozenset({"aten::add", "aten::add_", "aten::sub", "aten::sub_",
                                                           "aten::where"})

# -- what surrounds the core: roles of the ops of a block outside phase scopes (analysis.roles) ------

#: Ops that only change a tensor's view or layout (a copy at most): splitting heads before the
#: core, merging them after it, transposing k for q·kᵀ, slicing a mask or a rotary half.
LAYOUT_OPS = frozenset({
    "aten::view", "aten::reshape", "aten::_reshape_alias", "aten::_unsafe_view", "aten::transpose", "aten::permute",
    "aten::t", "aten::contiguous", "aten::split", "aten::split_with_sizes", "aten::chunk", "aten::unflatten",
    "aten::flatten", "aten::unsqueeze", "aten::squeeze", "aten::select", "aten::slice", "aten::narrow", "aten::alias",
    "aten::as_strided", "aten::unbind", "aten::movedim", "aten::swapaxes", "aten::expand_as"})
#: Layout ops that copy: the ``.contiguous()`` calls just before a fused core make its inputs and
#: belong to it, not to the RoPE or KV expansion before them.
CONTIGUOUS_OP = "aten::contiguous"
#: Transposes among them: the transpose of k just before q·kᵀ belongs to that matmul.
TRANSPOSE_OPS = frozenset({"aten::transpose", "aten::permute", "aten::t", "aten::swapaxes", "aten::movedim"})
#: Adding a dimension (``x[:, :, None]``): the unsqueeze before an expand or a rotary product.
UNSQUEEZE_OPS = frozenset({"aten::unsqueeze", "aten::slice"})
#: ``torch.cat``: a KV cache append, or the second half of ``rotate_half`` right after ``NEG_OP``.
CAT_OP = "aten::cat"
NEG_OP = "aten::neg"
#: Rotary position embeddings: ``rotate_half`` negates one half (``neg``) and concatenates;
#: the complex form multiplies in complex numbers. ``cos``/``sin``: tables computed in the block.
ROPE_OPS = frozenset({NEG_OP, "aten::cos", "aten::sin", "aten::view_as_complex", "aten::view_as_real",
                      "aten::polar"})
#: Rotary embeddings on interleaved pairs (DeepSeek's ``apply_rotary_pos_emb_interleave``), with no
#: ``neg``: each pair rotated as ``x1 * cos - x2 * sin`` (these ops, in order) and ``x2 * cos + x1 * sin``
#: (``ROTATION_JOIN``, then a ``cat`` joins the two halves).
ROTATION_OPS = ("aten::mul", "aten::mul", "aten::sub")
ROTATION_JOIN = ("aten::mul", "aten::mul", "aten::add")
#: Element-wise arithmetic: rotary embeddings before the core, scale and mask on the scores.
ARITHMETIC_OPS = SCALE_OPS | {"aten::add", "aten::add_", "aten::sub", "aten::sub_"}
#: Appending k and v to a cache: ``cat`` (dynamic caches) or writing in place (static caches).
KV_CACHE_OPS = frozenset({CAT_OP, "aten::index_copy", "aten::index_copy_", "aten::index_put",
                          "aten::index_put_", "aten::slice_scatter"})
#: Repeating k/v heads for grouped-query attention (``repeat_kv``: expand then reshape).
KV_EXPAND_OPS = frozenset({"aten::repeat_interleave", "aten::repeat", "aten::expand"})
#: Building or merging a mask (not applying it to the scores: ``MASK_OPS``).
MASK_BUILD_OPS = frozenset({"aten::bitwise_not", "aten::logical_not", "aten::logical_and", "aten::logical_or",
                            "aten::zeros_like", "aten::zeros", "aten::_canonical_mask", "aten::isneginf",
                            "aten::isinf", "aten::isnan", "aten::eq", "aten::ne"})
#: Normalization after the output projection (BERT's attention module ends in a LayerNorm).
NORM_OPS = frozenset({"aten::layer_norm", "aten::native_layer_norm", "aten::rms_norm", "aten::_fused_rms_norm",
                      "aten::group_norm"})
#: RMSNorm written in Python (Llama's, Qwen3's QK-norm): its pieces besides mul and to.
NORM_PIECE_OPS = frozenset({"aten::pow", "aten::mean", "aten::rsqrt", "aten::var_mean", "aten::sqrt"})
#: One op that runs a whole attention block, projections included (nn.MultiheadAttention's fast
#: path in inference): its own ops are the block's, so roles are read inside it.
NATIVE_MHA_OP = "aten::_native_multi_head_attention"
#: Where ``need_weights`` is among its inputs: (q, k, v, embed_dim, num_heads, qkv_weight,
#: qkv_bias, proj_weight, proj_bias, mask, need_weights, average_attn_weights, mask_type).
NATIVE_MHA_NEED_WEIGHTS_ARG = 10
FUSED_BLOCK_OPS = frozenset({NATIVE_MHA_OP})
#: Its projection of q, k and v together: bias, the 1/sqrt(head_dim) scale and the head split.
QKV_TRANSFORM_OP = "aten::_transform_bias_rescale_qkv"

# -- building masks ------------------------------------------------------------------------------

#: Triangular masks, out of place and in place.
TRIANGLE_OPS = frozenset({"aten::tril", "aten::triu", "aten::tril_", "aten::triu_"})
#: Position comparisons (``arange(S)[:, None] >= arange(S)``): a causal mask built by hand.
ARANGE_OP = "aten::arange"
COMPARE_OPS = frozenset({"aten::ge", "aten::le", "aten::gt", "aten::lt", "aten::greater_equal", "aten::less_equal",
                         "aten::greater", "aten::less"})
#: New tensors of one value, which a mask is built from.
FILL_OPS = frozenset({"aten::ones", "aten::new_ones", "aten::ones_like", "aten::full", "aten::new_full",
                      "aten::full_like"})
#: Every op whose output is a mask: ``MASK_BUILD_OPS``, triangles, position comparisons, fills.
MASK_MAKING_OPS = MASK_BUILD_OPS | TRIANGLE_OPS | COMPARE_OPS | FILL_OPS | {ARANGE_OP}
#: A learned relative position bias computed in the block (T5's ``compute_bias``): relative
#: positions from ``arange``, bucketed with comparisons, ``abs``, ``log``, ``min`` and ``where``,
#: then looked up in a (buckets, heads) table by ``embedding`` with an (Sq, Sk) index tensor.
EMBEDDING_OP = "aten::embedding"
POSITION_BIAS_OPS = MASK_MAKING_OPS | frozenset({EMBEDDING_OP, "aten::abs", "aten::log", "aten::min",
                                                 "aten::minimum", "aten::where", "aten::full_like"})

# -- copies ----------------------------------------------------------------------------------------

#: ``dst.copy_(src)``: the copy inside clones and conversions; ``Input type`` gives (dst, src).
INPLACE_COPY_OP = "aten::copy_"
#: Ops that always copy a tensor's data into another: a hidden copy where they run on scores.
COPY_OPS = frozenset({"aten::clone", INPLACE_COPY_OP})  # (CLONE_OP, defined below with the bytes model's ops)
#: Conversions: a copy made inside one is the conversion, not a hidden copy.
DTYPE_CONVERT_OPS = frozenset({"aten::to", "aten::_to_copy", "aten::type_as"})  # type_as: Gemma's norms end in it
#: What a matmul wrapper may do to an input before its GEMM: an allocation under one of these
#: is a copy of q or kᵀ, not scores. Wider than ``COPY_OPS``: ``reshape``, ``expand`` and
#: ``contiguous`` copy only sometimes, so elsewhere they are no evidence of a copy.
MATMUL_INPUT_COPY_OPS = COPY_OPS | {"aten::contiguous", "aten::reshape", "aten::_reshape_alias",
                                           "aten::expand"}

# -- bytes moved (analysis.traffic) ------------------------------------------------------------------

#: ATen ops' names start so; other events (compiled regions, Python functions, user annotations)
#: are not ops the bytes model judges.
ATEN_PREFIX = "aten::"
CLONE_OP = "aten::clone"
#: Softmax with a mask of its own (nn.MultiheadAttention's fast path): it reads the mask too.
MASKED_SOFTMAX_OP = "aten::_masked_softmax"
#: Ops that run other ops and move nothing beyond what those move: dispatching SDPA, the math
#: backend, matmul wrappers, an out-of-place masked_fill (a clone, then the in-place fill),
#: conversions (a copy_), dropout, and contiguous/reshape (a clone where the layout asks for one).
COMPOSITE_OPS = frozenset({SDPA_OP, SDPA_MATH_OP, *MATMUL_WRAPPER_OPS, "aten::masked_fill", *DTYPE_CONVERT_OPS,
                           "aten::dropout", "aten::contiguous", "aten::reshape"})
#: Ops counted as moving no data: views, allocations and bookkeeping (a copy they make is an op
#: nested in them, counted there), and building masks (an S×S bool at most: a quarter of one fp32
#: score tensor of one head and sequence).
#: A new tensor from Python data (``torch.tensor([])``, as a KV cache starts) or one to copy into
#: (``new_empty``: MLA assembles its keys in one): allocation and bookkeeping, no work.
TENSOR_NEW_OPS = frozenset({"aten::empty", "aten::lift_fresh", "aten::detach_", "aten::detach", "aten::new_empty"})
NO_TRAFFIC_OPS = LAYOUT_OPS | MASK_MAKING_OPS | COMPOSITE_OPS | TENSOR_NEW_OPS | frozenset({
    "aten::expand", "aten::resolve_conj", "aten::resolve_neg", "aten::empty_like",
    "aten::empty_strided", "aten::new_empty", "aten::new_empty_strided", "aten::new_zeros",
    "aten::scalar_tensor", "aten::item", "aten::_local_scalar_dense", "aten::set_",
    "aten::result_type", "aten::is_nonzero", "aten::size", "aten::_unsafe_view", "aten::view_as",
    "aten::_has_compatible_shallow_copy_type", "aten::record_stream", "aten::zero_", "aten::fill_"})

# -- attention libraries: FlashAttention, aiter, xformers, SageAttention, Transformer Engine -----
# Each library's attention as the torch.library ops it registers and the kernels it launches, names
# as its source spells them; docs/production.md cites the file of each. Backend names: analysis.backend.

#: FlashAttention 2 (Dao-AILab/flash-attention, flash_attn/flash_attn_interface.py,
#: ``_torch_custom_op_wrapper``). Forward: (q, k, v, dropout_p, softmax_scale, causal,
#: window_size_left, window_size_right, ...), q (B, Sq, H, D); varlen: (q, k, v, cu_seqlens_q,
#: cu_seqlens_k, max_seqlen_q, max_seqlen_k, ...), q (total_q, H, D).
FA2_FORWARD_OP = "flash_attn::_flash_attn_forward"
FA2_VARLEN_FORWARD_OP = "flash_attn::_flash_attn_varlen_forward"
FA2_BACKWARD_OP = "flash_attn::_flash_attn_backward"
FA2_OPS = frozenset({FA2_FORWARD_OP, FA2_VARLEN_FORWARD_OP, FA2_BACKWARD_OP, "flash_attn::_flash_attn_varlen_backward"})
#: FlashAttention 3 (hopper/flash_attn_interface.py): one forward op for dense, varlen and paged calls.
FA3_FORWARD_OP = "flash_attn_3::_flash_attn_forward"
FA3_BACKWARD_OP = "flash_attn_3::_flash_attn_backward"
FA3_OPS = frozenset({FA3_FORWARD_OP, FA3_BACKWARD_OP})
#: AMD aiter (ROCm/aiter, aiter/ops/mha.py; ``compile_ops`` registers each function as ``aiter::<name>``,
#: aiter/jit/utils/torch_guard.py). Dense: (q, k, v, dropout_p, softmax_scale, is_causal,
#: window_size_left, window_size_right, ...). Varlen and paged prefill: lengths in cu_seqlens/kv_indptr.
AITER_FORWARD_OP = "aiter::mha_fwd"
AITER_V3_FORWARD_OP = "aiter::fmha_v3_fwd"
AITER_VARLEN_OPS = frozenset({"aiter::mha_varlen_fwd", "aiter::fmha_v3_varlen_fwd", "aiter::mha_batch_prefill"})
AITER_ATTENTION_OPS = frozenset({AITER_FORWARD_OP, AITER_V3_FORWARD_OP, *AITER_VARLEN_OPS, "aiter::mha_bwd",
                                 "aiter::fmha_v3_bwd", "aiter::mha_varlen_bwd", "aiter::fmha_v3_varlen_bwd"})
#: aiter's KV-cache writes (aiter/ops/cache.py) and rotary embeddings (aiter/ops/rope.py).
AITER_KV_WRITE_OPS = frozenset({"aiter::reshape_and_cache", "aiter::reshape_and_cache_flash",
                                "aiter::reshape_and_cache_with_pertoken_quant",
                                "aiter::reshape_and_cache_with_block_quant"})
AITER_ROPE_OPS = frozenset({
    "aiter::rope_fwd_impl", "aiter::rope_2c_fwd_impl", "aiter::rope_cached_fwd_impl", "aiter::rope_cached_2c_fwd_impl",
    "aiter::rope_cached_positions_fwd_impl", "aiter::rope_cached_positions_2c_fwd_impl",
    "aiter::rope_cached_positions_offsets_fwd_impl", "aiter::rope_cached_positions_offsets_2c_fwd_impl",
    "aiter::rope_thd_fwd_impl", "aiter::rope_2d_fwd_impl"})
#: xformers (facebookresearch/xformers): its CK ops on ROCm (xformers/csrc/attention/attention.cpp),
#: (query, key, value, attn_bias, seqstart_q, seqstart_k, max_seqlen_q, dropout_p, compute_logsumexp,
#: custom_mask_type, scale, seqlen_k, window_size, block_tables, page_size), q (B, S, H, D); its CUTLASS
#: op before PyTorch took the kernels over (removed in 3d947a67; now ``aten::_efficient_attention_forward``);
#: and its wrappers of FlashAttention 2 and 3 (xformers/ops/fmha/flash.py, flash3.py).
XFORMERS_CK_OPS = frozenset({"xformers::efficient_attention_forward_ck",
                             "xformers::efficient_attention_forward_decoder_splitk_ck",
                             "xformers::efficient_attention_backward_ck"})
XFORMERS_CUTLASS_OPS = frozenset({"xformers::efficient_attention_forward_cutlass",
                                  "xformers::efficient_attention_backward_cutlass"})
XFORMERS_FLASH_OPS = frozenset({"xformers_flash::flash_fwd", "xformers_flash::flash_bwd", "xformers_flash3::flash_fwd",
                                "xformers_flash3::flash_bwd"})
#: SageAttention (thu-ml/SageAttention, sageattention/sm80_compile.py, sm89_compile.py, sm90_compile.py):
#: (query, key, value, output, query_scale, key_scale[, value_scale][, value_mean], tensor_layout,
#: is_causal, ...): name -> index of ``tensor_layout`` (0: (B, S, H, D), 1: (B, H, S, D)); ``is_causal``
#: (an int) follows it. Its causal mask is aligned to the top left (csrc/qattn/qk_int_sv_f16_cuda_sm80.cu).
SAGE_OPS: dict[str, int] = {
    "sageattention::qk_int8_sv_f16_accum_f16_attn": 6, "sageattention::qk_int8_sv_f16_accum_f32_attn": 6,
    "sageattention::qk_int8_sv_f16_accum_f16_attn_inst_buf": 6,
    "sageattention::qk_int8_sv_f16_accum_f16_fuse_v_mean_attn": 7,
    "sageattention_sm89::qk_int8_sv_f8_accum_f32_fuse_v_scale_attn": 7,
    "sageattention_sm89::qk_int8_sv_f8_accum_f32_fuse_v_scale_attn_inst_buf": 7,
    "sageattention_sm89::qk_int8_sv_f8_accum_f16_fuse_v_scale_attn_inst_buf": 7,
    "sageattention_sm89::qk_int8_sv_f8_accum_f32_fuse_v_scale_fuse_v_mean_attn": 8,
    "sageattention_sm90::qk_int8_sv_f8_accum_f32_attn_inst_buf": 6,
    "sageattention_sm90::qk_int8_sv_f8_accum_f32_fuse_v_scale_attn_inst_buf": 7,
}
#: Transformer Engine (NVIDIA/TransformerEngine): its fused attention's autograd function
#: (transformer_engine/pytorch/attention/dot_product_attention/backends.py; the C++ call under it is
#: pybind, no op), and its KV-cache write (transformer_engine/pytorch/attention/custom_ops.py).
TE_FUSED_ATTN_OP = "FusedAttnFunc"
TE_KV_WRITE_OPS = frozenset({"te_kv_cache::copy_to_kv_cache"})

#: Library ops whose ``Input Dims`` can give their work: name -> (index of q, of causal, of
#: window_size_left, of window_size_right, arguments that make the call varlen, paged or appending
#: when recorded (the lengths are then tensor values, which the profiler does not record), scalars
#: that must be 0). q, k, v follow each other as (B, S, H, D); the causal mask is aligned to the
#: bottom right (FlashAttention's convention, which aiter follows: csrc/py_itfs_ck/mha_fwd_kernels.cu "b:").
LIBRARY_ATTENTION: dict[str, tuple[int, int, int, int, tuple[int, ...], tuple[int, ...]]] = {
    FA2_FORWARD_OP: (0, 5, 6, 7, (), ()),
    # (dout, q, k, v, out, softmax_lse, dq, dk, dv, dropout_p, softmax_scale, causal, window_size_left, ...)
    FA2_BACKWARD_OP: (1, 11, 12, 13, (), ()),
    # (q, k, v, k_new, v_new, qv, out_, cu_seqlens_q, cu_seqlens_k, cu_seqlens_k_new, seqused_q, seqused_k,
    #  max_seqlen_q, max_seqlen_k, page_table, kv_batch_idx, leftpad_k, ..., softmax_scale, causal,
    #  window_size_left, window_size_right, attention_chunk, ...)
    FA3_FORWARD_OP: (0, 24, 25, 26, (3, 4, 5, 7, 8, 9, 10, 11, 14, 15, 16), (27,)),
    # (dout, q, k, v, out, softmax_lse, cu_seqlens_q, cu_seqlens_k, seqused_q, seqused_k, ..., is_causal, ...)
    FA3_BACKWARD_OP: (1, 16, 17, 18, (6, 7, 8, 9), ()),
    # (..., window_size_right, sink_size, return_softmax_lse, return_dropout_randval, cu_seqlens_q, cu_seqlens_kv)
    AITER_FORWARD_OP: (0, 5, 6, 7, (11, 12), (8,)),
    AITER_V3_FORWARD_OP: (0, 5, 6, 7, (), ()),
}
#: Backward ops among them: 2.5 times the forward's work, as SDPA's (``flops.BACKWARD_FACTOR``).
LIBRARY_BACKWARD_OPS = frozenset({FA2_BACKWARD_OP, FA3_BACKWARD_OP})
#: xformers' forward ops laid out as ``aten::_efficient_attention_forward`` (q (B, S, H, D), the mask
#: type at 9: 1 top-left causal, 2 bottom-right): name -> arguments that make the call varlen, paged
#: or windowed when recorded.
XFORMERS_FORWARD: dict[str, tuple[int, ...]] = {
    "xformers::efficient_attention_forward_ck": (4, 5, 11, 12, 13),
    # (query, key, value, bias, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
    #  custom_mask_type, compute_log_sumexp, scale, seqlen_k, window_size)
    "xformers::efficient_attention_forward_cutlass": (4, 5, 12, 13),
}
#: Every library op that is one attention call's fused core (forward and backward): the ``sdpa``
#: phase, and a core that inference anchors a block on, as it does an SDPA op.
ATTENTION_CORE_OPS = FA2_OPS | FA3_OPS | AITER_ATTENTION_OPS | XFORMERS_CK_OPS | XFORMERS_CUTLASS_OPS \
    | XFORMERS_FLASH_OPS | frozenset(SAGE_OPS) | {TE_FUSED_ATTN_OP}
#: Library KV-cache writes and rotary embeddings: the ``kv_cache`` and ``rope`` phases.
LIBRARY_KV_WRITE_OPS = AITER_KV_WRITE_OPS | TE_KV_WRITE_OPS
LIBRARY_ROPE_OPS = AITER_ROPE_OPS
#: Library ops whose shapes the analysis reads: every core's (its FLOPs, or why they are unknown).
LIBRARY_SHAPE_OPS = ATTENTION_CORE_OPS

#: Kernels by library, matched by substring (``analysis.backend``), each as its source names it:
#: FlashAttention 3's kernel classes (hopper/flash_fwd_kernel_sm90.h, flash_fwd_kernel_sm80.h, launched as
#: ``cutlass::device_kernel<flash::FlashAttnFwdSm90<...>>``); FlashAttention 4's cute-DSL kernels, whose
#: symbols carry the module path ``flash_attn.cute`` (flash_attn/cute/flash_fwd_sm100.py:
#: ``kernel_cutlass_kernel_flash_attncuteflash_fwd_sm100FlashAttentionForwardSm100_...``);
#: FlashInfer's (include/flashinfer/attention/prefill.cuh, decode.cuh, namespace ``flashinfer``);
#: TensorRT-LLM's (trtllm-gen cubins ``fmhaSm100aKernel_...``, which FlashInfer also ships, and
#: fmha_v2 ``fmha_v2_flash_attention_...``); aiter's assembly kernels (hsa/gfx942/fmha_v3_fwd/fmha_fwd.csv:
#: ``_ZN5aiter24fmha_fwd_hd128_bf16_rtneE``); Composable Kernel's ck_tile FMHA kernels
#: (include/ck_tile/ops/fmha/kernel/); SageAttention's (csrc/qattn/qk_int_sv_f8_cuda_sm89.cuh ...).
FA3_KERNELS = ("FlashAttnFwdSm90", "FlashAttnFwdSm80")
FA4_KERNELS = ("flash_attncute",)
FLASHINFER_KERNELS = ("flashinfer::BatchPrefillWith", "flashinfer::BatchDecodeWith", "flashinfer::SinglePrefillWith",
                      "flashinfer::SingleDecodeWith")
TRTLLM_FMHA_KERNELS = ("fmhaSm", "fmha_v2_")
AITER_ASM_KERNELS = ("fmha_fwd_hd",)
CK_FMHA_KERNELS = ("FmhaFwdKernel", "FmhaFwdSplitKVKernel", "FmhaFwdPagedKVKernel",
                   "FmhaBatchPrefillWithPagedKVCacheKernel")
SAGE_KERNELS = ("qk_int_sv_f16_attn_kernel", "qk_int_sv_f8_attn_kernel")
#: SageAttention's quantization kernels (csrc/fused/fused.cu; sageattention/triton/quant_per_block.py):
#: pybind and Triton calls with no op of their own.
SAGE_QUANT_KERNELS = ("QuantInt8Kernel", "MeanScaleKernel", "SubMeanKernel", "TransposePadPermuteKernel",
                      "quant_per_block_int8_kernel")
#: aiter's Triton SageAttention on ROCm (ROCm/aiter, aiter/ops/triton/_triton_kernels/attention/
#: fav3_sage_attention.py: the kernel ``sage_fwd``; fav3_sage_attention_mxfp4.py: ``sage_fwd_mxfp4``), which
#: ``fav3_sage_func`` (aiter/ops/triton/attention/fav3_sage.py) launches with no op of its own: int8 q·kᵀ.
AITER_SAGE_KERNELS = ("sage_fwd",)
#: Its quantization kernels (aiter/ops/triton/_triton_kernels/quant/sage_attention_quant.py:
#: ``sage_quant_kernel``, ``sage_quant_v_kernel`` and the other ``sage_quant_*``, ``_rotate_quantize_q_kernel``...).
AITER_SAGE_QUANT_KERNELS = ("sage_quant", "_rotate_quantize_")
#: Attention libraries' quantization kernels, matched by substring: their device time is the
#: ``quantize`` phase's wherever in a block they were launched (``analysis.attribute``).
LIBRARY_QUANT_KERNELS = SAGE_QUANT_KERNELS + AITER_SAGE_QUANT_KERNELS

__all__ += [
    "AITER_ASM_KERNELS",
    "AITER_ATTENTION_OPS",
    "AITER_FORWARD_OP",
    "AITER_KV_WRITE_OPS",
    "AITER_ROPE_OPS",
    "AITER_SAGE_KERNELS",
    "AITER_SAGE_QUANT_KERNELS",
    "AITER_V3_FORWARD_OP",
    "AITER_VARLEN_OPS",
    "ATTENTION_CORE_OPS",
    "CK_FMHA_KERNELS",
    "FA2_BACKWARD_OP",
    "FA2_FORWARD_OP",
    "FA2_OPS",
    "FA2_VARLEN_FORWARD_OP",
    "FA3_BACKWARD_OP",
    "FA3_FORWARD_OP",
    "FA3_KERNELS",
    "FA3_OPS",
    "FA4_KERNELS",
    "FLASHINFER_KERNELS",
    "LIBRARY_ATTENTION",
    "LIBRARY_BACKWARD_OPS",
    "LIBRARY_KV_WRITE_OPS",
    "LIBRARY_QUANT_KERNELS",
    "LIBRARY_ROPE_OPS",
    "LIBRARY_SHAPE_OPS",
    "SAGE_KERNELS",
    "SAGE_OPS",
    "SAGE_QUANT_KERNELS",
    "TE_FUSED_ATTN_OP",
    "TE_KV_WRITE_OPS",
    "TRTLLM_FMHA_KERNELS",
    "XFORMERS_CK_OPS",
    "XFORMERS_CUTLASS_OPS",
    "XFORMERS_FLASH_OPS",
    "XFORMERS_FORWARD",
]

# -- serving engines: vLLM, SGLang ---------------------------------------------------------------
# A serving engine runs attention as its own custom op over a paged KV cache, not as SDPA; its
# RoPE and its KV-cache write are ops of their own too. Names as the engines register them (the
# source file beside each set); docs/production.md lists them.

#: vLLM's attention ops (``direct_register_custom_op`` in vllm/model_executor/layers/attention/
#: attention.py, vllm/attention/layer.py before it): one per layer and forward, whatever backend
#: runs inside; MLA's (.../attention/mla_attention.py) apart.
VLLM_UNIFIED_OPS = frozenset({"vllm::unified_attention", "vllm::unified_attention_with_output"})
VLLM_MLA_OPS = frozenset({"vllm::unified_mla_attention", "vllm::unified_mla_attention_with_output"})
#: vLLM's paged-attention ops: CUDA (csrc/torch_bindings.cpp, the V0 decode path) and ROCm
#: (csrc/rocm/torch_bindings.cpp).
VLLM_PAGED_OPS = frozenset({"_C::paged_attention_v1", "_C::paged_attention_v2"})
VLLM_ROCM_PAGED_OPS = frozenset({"_rocm_C::paged_attention"})
#: vLLM's Gated DeltaNet core, the linear attention of Qwen3-Next's and Qwen3.5's hybrid layers: the
#: causal conv1d and the gated delta rule's state update, one op per layer and forward
#: (vllm/model_executor/layers/mamba/gdn_linear_attn.py ``direct_register_custom_op(op_name="gdn_attention_core")``;
#: ``qwen_gdn_attention_core`` in .../mamba/gdn/qwen_gdn_linear_attn.py). A state, no (Sq, Sk) scores.
VLLM_GDN_OPS = frozenset({"vllm::gdn_attention_core", "vllm::qwen_gdn_attention_core"})
#: The gated delta rule's kernels, flash-linear-attention's as vLLM vendors them, matched by substring
#: (vllm/model_executor/layers/fla/ops/chunk_delta_h.py ``chunk_gated_delta_rule_fwd_kernel_h_blockdim64``,
#: fused_recurrent.py ``fused_recurrent_gated_delta_rule_fwd_kernel``, fused_sigmoid_gating.py
#: ``fused_sigmoid_gating_delta_rule_update_kernel``).
GDN_KERNELS = ("gated_delta_rule", "gating_delta_rule")
VLLM_CORE_OPS = VLLM_UNIFIED_OPS | VLLM_MLA_OPS | VLLM_PAGED_OPS | VLLM_ROCM_PAGED_OPS | VLLM_GDN_OPS
#: Serving cores of linear attention: no (query, key) pairs, so a batch annotation's pairs do not
#: give their work (``analysis.batch``).
SERVING_LINEAR_CORE_OPS = VLLM_GDN_OPS
#: SGLang's attention op (``unified_attention_with_output`` in python/sglang/srt/layers/
#: radix_attention.py, the piecewise-graph path of ``RadixAttention``).
SGLANG_CORE_OPS = frozenset({"sglang::unified_attention_with_output"})
#: SGLang's kernel-shape profiler (python/sglang/srt/utils/kernel_shape_profiler.py) wraps kernel
#: entry points as ops named ``sglang_profiler::<last module name>_<function>_<counter>``; the
#: counter differs between runs, so the names below are without it (``analysis.opnames.canonical``).
SGLANG_PROFILER_PREFIX = "sglang_profiler::"
SGLANG_PROFILER_COUNTER = r"_\d+$"
#: Its attention entry points: aiter's paged decode (aiter/ops/attention.py ``paged_attention_ragged``,
#: which SGLang's aiter backend calls), aiter's paged prefill (aiter/ops/mha.py ``_mha_batch_prefill``),
#: and SGLang's Triton kernels (python/sglang/srt/layers/attention/triton_ops/decode_attention.py,
#: extend_attention.py, prefill_attention.py).
SGLANG_AITER_DECODE_OPS = frozenset({"sglang_profiler::attention_paged_attention_ragged"})
SGLANG_AITER_PREFILL_OPS = frozenset({"sglang_profiler::mha__mha_batch_prefill"})
SGLANG_TRITON_OPS = frozenset({
    "sglang_profiler::decode_attention_decode_attention_fwd",
    "sglang_profiler::decode_attention_decode_attention_fwd_normal",
    "sglang_profiler::decode_attention_decode_attention_fwd_grouped",
    "sglang_profiler::extend_attention_extend_attention_fwd",
    "sglang_profiler::prefill_attention_context_attention_fwd"})
SGLANG_PROFILER_CORE_OPS = SGLANG_AITER_DECODE_OPS | SGLANG_AITER_PREFILL_OPS | SGLANG_TRITON_OPS
#: Every serving-engine op that is one layer's attention core (the fused kernel's own work: q·kᵀ,
#: softmax and attn·v over the paged cache, like a fused SDPA call).
SERVING_CORE_OPS = VLLM_CORE_OPS | SGLANG_CORE_OPS | SGLANG_PROFILER_CORE_OPS
#: Writing this step's k and v into the paged KV cache: vLLM's op (attention.py above) and its cache
#: kernels' ops (csrc/torch_bindings.cpp ``_C_cache_ops``), SGLang's ``store_cache`` (its JIT
#: kernel, python/sglang/jit_kernel) and its profiler range around it
#: (python/sglang/srt/mem_cache/memory_pool.py ``_set_kv_buffer_impl``).
SERVING_KV_WRITE_OPS = frozenset({
    "vllm::unified_kv_cache_update", "vllm::unified_mla_kv_cache_update", "_C_cache_ops::reshape_and_cache",
    "_C_cache_ops::reshape_and_cache_flash", "_C_cache_ops::concat_and_cache_mla", "sglang::store_cache",
    "sglang_profiler::memory_pool__set_kv_buffer_impl"})
#: A serving engine's ops whose shapes are read: its core's q (heads and head size, analysis/batch.py),
#: its KV write's k, v and cache (the cache's bytes per token). SGLang's are matched without their
#: counter (``SGLANG_PROFILER_COUNTER``).
SERVING_SHAPE_OPS = SERVING_CORE_OPS | SERVING_KV_WRITE_OPS
#: Where a KV write op's cache is among its inputs (k, v, cache...: vLLM's ``reshape_and_cache*`` and
#: ``concat_and_cache_mla``, SGLang's ``store_cache`` and ``set_kv_buffer``): its element type is the
#: cache's (``unsigned char`` where vLLM stores FP8 as bytes).
SERVING_KV_CACHE_ARG = 2
#: vLLM's annotation of each engine iteration (vllm/v1/worker/gpu_worker.py ``annotate_profile``):
#: ``execute_context_<requests>(<tokens>)_generation_<requests>(<tokens>)``, prefill ("context": no
#: token generated yet) and decode requests and their scheduled tokens. A detailed form, seen in
#: AMD's SGLang traces (shared/production-traces), adds the step's tokens and, per kind, the sums of
#: the query lengths, key lengths, their squares and their products (``analysis.batch``).
SERVING_BATCH_PATTERN = r"^execute_context_(?P<cn>\d+)\((?P<ct>\d+)\)_generation_(?P<gn>\d+)\((?P<gt>\d+)\)$"
SERVING_BATCH_DETAILED_PATTERN = "".join((
    r"^execute_(?P<tokens>\d+)_context_(?P<cn>\d+)\(",
    r"sq(?P<csq>\d+)sk(?P<csk>\d+)sqsq(?P<csqsq>\d+)sqsk(?P<csqsk>\d+)",
    r"\)_generation_(?P<gn>\d+)\(",
    r"sq(?P<gsq>\d+)sk(?P<gsk>\d+)sqsq(?P<gsqsq>\d+)sqsk(?P<gsqsk>\d+)\)$"))
#: Rotary embeddings as one op: vLLM's (csrc/torch_bindings.cpp) and sgl-kernel's
#: (sgl-kernel/csrc/common_extension.cc).
SERVING_ROPE_OPS = frozenset({"_C::rotary_embedding", "_C::batched_rotary_embedding", "sgl_kernel::rotary_embedding",
                              "sgl_kernel::apply_rope_pos_ids_cos_sin_cache"})
#: Serving engines' GEMM wrappers around ``aten::linear``: vLLM's ROCm GEMM op
#: (vllm/model_executor/layers/utils.py ``rocm_unquantized_gemm``) and aiter's, which SGLang calls
#: on ROCm (aiter/ops/gemm_op_a16w16.py). Read as the projection inside them.
SERVING_GEMM_OPS = frozenset({"vllm::rocm_unquantized_gemm", "aiter::gemm_a16w16"})
#: A serving model's QK-norm as one op: SGLang's ``apply_qk_norm`` (python/sglang/srt/models/utils.py)
#: under its kernel-shape profiler, read through ``serving.canonical``.
SERVING_QK_NORM_OPS = frozenset({"sglang_profiler::utils_apply_qk_norm"})
#: Bookkeeping between vLLM's graph pieces: weak references to the pieces' outputs
#: (vllm/utils/torch_utils.py ``weak_ref_tensor``); no work of the model's.
SERVING_BOOKKEEPING_OPS = frozenset({"_C::weak_ref_tensor"})
#: Kernels that are a serving engine's attention core, matched by substring: vLLM's Triton unified
#: attention (vllm/attention/ops/triton_unified_attention.py ``kernel_unified_attention_2d``/``_3d``),
#: its CUDA paged attention (csrc/attention/paged_attention_v1.cu, _v2.cu) and its ROCm one
#: (csrc/rocm/attention.cu ``paged_attention_ll4mi_*``).
VLLM_TRITON_KERNELS = ("kernel_unified_attention",)
VLLM_PAGED_KERNELS = ("paged_attention_v1_kernel", "paged_attention_v2_kernel")
VLLM_ROCM_PAGED_KERNELS = ("paged_attention_ll4mi",)

# -- what the decoder keeps ----------------------------------------------------------------------

#: Ops whose ``Input Dims`` / ``Input type`` / ``Concrete Inputs`` are read (FLOPs, bytes moved,
#: S×S score sizes, dtypes, copies, a serving core's q and its KV cache's element type). The
#: decoder skips the shapes of every other op to save memory and time; the element-wise ops' shapes
#: cost about N% more decoding time on a trace of a whole model (bench/README.md, "Bytes model").
SHAPE_OPS: frozenset[str] = frozenset(
    {*MATMUL_ARGS, *INT_MATMUL_ARGS, LINEAR_OP, *SOFTMAX_OPS, *MASKED_FILL_OPS, *SDPA_OPS, FLASH_FORWARD_OP,
     EFFICIENT_FORWARD_OP, *SDPA_BACKWARD, *KERNEL_BACKWARD_OPS, *COPY_OPS, *DTYPE_CONVERT_OPS, *FUSED_BLOCK_OPS,
     *KV_EXPAND_OPS, *ELEMENTWISE_OPS, NATIVE_DROPOUT_OP, *NORM_OPS, EMBEDDING_OP, *LIBRARY_SHAPE_OPS,
     *SERVING_SHAPE_OPS})

# -- Inductor's generated kernels ----------------------------------------------------------------
#: torch.compile's Triton kernels are named ``triton_<category>_fused_<origins>_<n>``: the first three
#: letters of the category (pointwise, reduction, persistent reduction, template, foreach), then
#: the sorted names of the ATen ops the kernel was generated from, joined by "_" (PyTorch
#: ``torch/_inductor/codegen/triton.py`` and ``get_fused_kernel_name`` in ``torch/_inductor/utils.py``).
#: The op events Inductor records around each launch carry the same name.
INDUCTOR_KERNEL_PREFIX = "triton_"
INDUCTOR_TEMPLATE = "tem"
#: A template kernel from these is a GEMM with its epilogue fused: a projection.
INDUCTOR_GEMM_ORIGINS = frozenset({"mm", "addmm", "linear"})
#: Origins that only move, convert or join data (the SDPA op names the layout kernel that feeds
#: it its q, k and v, or takes its output apart).
INDUCTOR_LAYOUT_ORIGINS = frozenset({
    *(op.removeprefix("aten::") for op in LAYOUT_OPS | COPY_OPS | DTYPE_CONVERT_OPS | KV_EXPAND_OPS),
    "cat", "stack", "constant_pad_nd", "copy", "_to_copy", "expand", "clone", "permute",
    *(op.removeprefix("aten::") for op in SDPA_OPS)})
#: A norm: whole, or RMSNorm's pieces (``mean`` with ``rsqrt``).
INDUCTOR_NORM_ORIGINS = frozenset({"native_layer_norm", "layer_norm", "rms_norm", "_fused_rms_norm",
                                   "native_group_norm", "var_mean"})
INDUCTOR_RMS_ORIGINS = frozenset({"mean", "rsqrt"})
INDUCTOR_NORM_PIECE_ORIGINS = frozenset({"mean", "rsqrt", "pow", "sqrt", "sum"})
#: Element-wise arithmetic (``addmm`` in a pointwise kernel is the bias of an extern GEMM).
INDUCTOR_ARITH_ORIGINS = frozenset({"add", "sub", "mul", "div", "rsub", "addmm", "reciprocal"})
#: Rotary embeddings: rotate_half's ``neg``, the tables' ``cos`` and ``sin``, the complex form.
INDUCTOR_ROPE_ORIGINS = frozenset(op.removeprefix("aten::") for op in ROPE_OPS)
#: What an Inductor kernel is read as, for the roles and the block's extent (``analysis.inductor``):
#: a projection's element-wise prologue or epilogue (bias, scale, residual: no ATen op says that),
#: a layout kernel as a view, a norm as ``layer_norm``.
INDUCTOR_EPILOGUE_OP = "inductor::epilogue"
INDUCTOR_LAYOUT_OP = "aten::view"
INDUCTOR_NORM_OP = "aten::layer_norm"

# -- CUDA/HIP graphs ------------------------------------------------------------------------------
#: Runtime calls that capture a stream into a graph: kernels launched between them are recorded
#: into the graph, not run (their launches show; their kernels do not).
GRAPH_CAPTURE_BEGIN = frozenset({"cudaStreamBeginCapture", "hipStreamBeginCapture", "cuStreamBeginCapture",
                                 "cudaStreamBeginCaptureToGraph"})
GRAPH_CAPTURE_END = frozenset({"cudaStreamEndCapture", "hipStreamEndCapture", "cuStreamEndCapture"})
#: Replaying a captured graph: its kernels run under this one launch, not under the ops that
#: captured them.
GRAPH_LAUNCH = frozenset({"cudaGraphLaunch", "hipGraphLaunch", "cuGraphLaunch"})
#: Kernels a graph replay runs around its attention cores, matched by substring: the paged KV
#: write (vLLM csrc/cache_kernels.cu ``reshape_and_cache_kernel``, ``reshape_and_cache_flash_kernel``,
#: ``concat_and_cache_mla_kernel``; SGLang's ``store_kvcache``; FlashInfer's ``AppendPagedKVCacheKernel``)
#: and RoPE (vLLM csrc/pos_encoding_kernels.cu ``rotary_embedding_kernel``,
#: ``batched_rotary_embedding_kernel``; FlashInfer's ``BatchQKApplyRotary``).
REPLAY_KV_WRITE_KERNELS = ("reshape_and_cache_kernel", "reshape_and_cache_flash_kernel", "concat_and_cache_mla_kernel",
                           "store_kvcache", "AppendPagedKVCacheKernel")
REPLAY_ROPE_KERNELS = ("rotary_embedding_kernel", "BatchQKApplyRotary")
#: Runtime and driver calls that add a node to the graph a stream is capturing, matched by substring:
#: kernel launches (``cudaLaunchKernel``, ``cudaLaunchKernelExC``, ``cuLaunchKernel(Ex)``,
#: ``hipLaunchKernel``, ``hipModuleLaunchKernel``, ``hipExtModuleLaunchKernel``...) and asynchronous
#: copies and sets, each one kernel, memcpy or memset of every replay, in the capture's order.
GRAPH_NODE_CALLS = ("LaunchKernel", "LaunchCooperativeKernel", "MemcpyAsync", "Memcpy2DAsync", "Memcpy3DAsync",
                    "MemcpyHtoDAsync", "MemcpyDtoDAsync", "MemcpyDtoHAsync", "MemcpyWithStream", "MemsetAsync",
                    "Memset2DAsync", "MemsetD8Async", "MemsetD16Async", "MemsetD32Async")

# -- collectives ------------------------------------------------------------------------------------
#: Collectives that are a serving engine's own ops, and what each is (``analysis.collectives``): vLLM's
#: (vllm/distributed/parallel_state.py ``direct_register_custom_op(op_name="all_reduce")`` and its
#: siblings) and its custom all-reduce's op (csrc/torch_bindings.cpp ``_C_custom_ar``).
SERVING_COLLECTIVE_OPS = {"vllm::all_reduce": "all_reduce", "vllm::all_gather": "all_gather",
                          "vllm::reduce_scatter": "reduce_scatter", "_C_custom_ar::all_reduce": "all_reduce"}
#: Collective kernels not named ``ncclDevKernel_<Coll>...``, matched by substring, and what each is:
#: vLLM's custom all-reduce (csrc/custom_all_reduce.cuh ``cross_device_reduce_1stage``, ``_2stage``,
#: ``_half_butterfly``) and TensorRT-LLM's all-reduce fused with the residual and norm as FlashInfer ships it
#: (include/flashinfer/comm/trtllm_allreduce_fusion.cuh ``allreduce_fusion_kernel_oneshot_lamport``,
#: ``allreduce_fusion_kernel_twoshot_sync``). NCCL's own kernels (src/device/generate.py
#: ``ncclDevKernel_AllReduce_Sum_bf16_RING_LL``; src/device/symmetric/generate.py
#: ``ncclSymkDevKernel_AllReduce_...``; RCCL keeps the names) are read by their pattern there.
COLLECTIVE_KERNELS = {"cross_device_reduce_": "all_reduce", "allreduce_fusion_kernel": "all_reduce"}
#: What ``torch.cuda.graph`` runs as it begins a capture, between the ops captured before and after:
#: the RNG state's seed and offset filled for the graph (``capture_prologue`` in PyTorch's
#: ``aten/src/ATen/cuda/CUDAGeneratorImpl.cpp``).
GRAPH_CAPTURE_BOOKKEEPING_OPS = frozenset({"aten::fill_"})

__all__ += ["INDUCTOR_ARITH_ORIGINS", "INDUCTOR_EPILOGUE_OP", "INDUCTOR_GEMM_ORIGINS", "INDUCTOR_KERNEL_PREFIX",
            "INDUCTOR_LAYOUT_OP", "INDUCTOR_LAYOUT_ORIGINS", "INDUCTOR_NORM_OP", "INDUCTOR_NORM_ORIGINS",
            "INDUCTOR_NORM_PIECE_ORIGINS", "INDUCTOR_RMS_ORIGINS", "INDUCTOR_ROPE_ORIGINS", "INDUCTOR_TEMPLATE"]
__all__ += [
    "COLLECTIVE_KERNELS",
    "GDN_KERNELS",
    "GRAPH_CAPTURE_BEGIN",
    "GRAPH_CAPTURE_BOOKKEEPING_OPS",
    "GRAPH_CAPTURE_END",
    "GRAPH_LAUNCH",
    "GRAPH_NODE_CALLS",
    "REPLAY_KV_WRITE_KERNELS",
    "REPLAY_ROPE_KERNELS",
    "SERVING_BATCH_DETAILED_PATTERN",
    "SERVING_BATCH_PATTERN",
    "SERVING_BOOKKEEPING_OPS",
    "SERVING_COLLECTIVE_OPS",
    "SERVING_CORE_OPS",
    "SERVING_GEMM_OPS",
    "SERVING_KV_CACHE_ARG",
    "SERVING_KV_WRITE_OPS",
    "SERVING_LINEAR_CORE_OPS",
    "SERVING_QK_NORM_OPS",
    "SERVING_ROPE_OPS",
    "SERVING_SHAPE_OPS",
    "SGLANG_AITER_DECODE_OPS",
    "SGLANG_AITER_PREFILL_OPS",
    "SGLANG_CORE_OPS",
    "SGLANG_PROFILER_CORE_OPS",
    "SGLANG_PROFILER_COUNTER",
    "SGLANG_PROFILER_PREFIX",
    "SGLANG_TRITON_OPS",
    "VLLM_CORE_OPS",
    "VLLM_GDN_OPS",
    "VLLM_MLA_OPS",
    "VLLM_PAGED_KERNELS",
    "VLLM_PAGED_OPS",
    "VLLM_ROCM_PAGED_KERNELS",
    "VLLM_ROCM_PAGED_OPS",
    "VLLM_TRITON_KERNELS",
    "VLLM_UNIFIED_OPS",
]
