"""ATen's op names that the analysis recognises, one set per meaning, and what ``torch.compile``
leaves of attention in a trace.

Each set is named for what its members have in common in a trace, not for the module that
reads it, and where two sets look alike the comment says why they differ. PyTorch's own kernel
names are not here: the backend rules match them by substring (``analysis.backend``). Attention
libraries' ops and kernels are in ``libraries``, serving engines' in ``serving``, the names of
generated kernels, graphs and collectives in ``kernels``, and the ops whose shapes the decoder
keeps in ``shape_ops``.
"""

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
