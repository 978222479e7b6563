"""What the corpus traces (``devtools/corpus.py``, committed in ``traces/``) hold, written down by
reading each trace: layer 0's backend; its first forward block's top-level ops, phase by phase,
in order (``aten::`` left off); the findings; the score tensors and score-shaped masks one
forward allocates; why SDPA fell back to its math backend.

How these were read, so that a change of expectation is a change of reading, not of output:

- Head split and merge are the projections' (``view``/``transpose`` after ``linear``, the merge
  before ``out_proj``), the ``transpose`` of k is q·kᵀ's, and ``to`` after the softmax is its
  cast back to the model's dtype.
- Llama: ``unsqueeze`` of cos/sin, ``mul``, ``slice``, ``neg``, ``cat``, ``mul``, ``add``, for q
  then k, are rotary embeddings; the two other ``cat`` are the dynamic KV cache's append
  (transformers 5's DynamicLayer concatenates even on the first call, after an empty tensor:
  the ``empty to lift_fresh detach_`` bookkeeping left in other); ``unsqueeze expand reshape``
  twice is repeat_kv.
- GPT-2 and Llama eager: ``mul`` on the scores is the scale, ``add`` the causal mask.
- BERT's attention module ends in its output sublayer: dense, dropout, residual ``add``,
  ``layer_norm``, all the output projection's.
- nn.MultiheadAttention: ``zeros_like masked_fill_`` turn the bool mask into a float one before
  the projections (in inference broadcast by ``view expand``); in inference the fast path
  ``_native_multi_head_attention`` runs the block as one op, read through its own ops (its
  ``to`` of the mask to bool, and with need_weights its ``sum div_`` averaging the weights over
  heads, stay in other).
- Scores: q·kᵀ, then each op that writes a new score tensor (scale, mask, softmax, dropout's
  product). Masks: dropout's noise, the math backend's ``ones``/``tril``/``where`` mask and
  ``isneginf``, nn.MHA's float and bool masks. (With need_weights the averaged weights are
  (B, Sq, Sk) fp32, the size of a (B, 4, Sq, Sk) bool mask: neither.)
- Every SDPA fallback on this CPU corpus is dropout in training: masks, grouped-query attention
  and head dimension 12 all run the CPU flash kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EXPECTED", "Expected"]


@dataclass(frozen=True)
class Expected:
    backend: str
    findings: set[str]
    phases: dict[str, str]
    scores: tuple[int, int] | None = None  # (score tensors, score-shaped masks) per forward of layer 0
    causes: str | None = None  # math-fallback's causes


EXPECTED: dict[str, Expected] = {
    "builtin-naive-infer": Expected(
        backend="naive",
        scores=(4, 0),
        findings={"hidden-copy", "sxs-materialized", "share-of-step"},
        phases={
            "qkv_proj": "linear split_with_sizes view transpose view transpose view transpose",
            "qk_matmul": "transpose matmul",
            "scale": "mul",
            "mask": "alias masked_fill",
            "softmax": "softmax",
            "av_matmul": "matmul",
            "out_proj": "transpose contiguous view linear",
        },
    ),
    "builtin-sdpa-dropout-train": Expected(
        backend="sdpa-math",
        scores=(3, 5),
        causes="dropout",
        findings={"math-fallback", "sxs-materialized", "mask-rebuilt", "safe-softmax", "share-of-step"},
        phases={
            "qkv_proj": "linear split_with_sizes view transpose view transpose view transpose",
            "sdpa": "scaled_dot_product_attention",
            "out_proj": "transpose contiguous view linear",
        },
    ),
    "builtin-sdpa-hd12-infer": Expected(
        backend="cpu-flash",
        findings={"dispatch-bound", "share-of-step"},
        phases={
            "qkv_proj": "linear split_with_sizes view transpose view transpose view transpose",
            "sdpa": "scaled_dot_product_attention",
            "out_proj": "transpose view linear",
        },
    ),
    "builtin-sdpa-mask-infer": Expected(
        backend="cpu-flash",
        findings={"share-of-step"},
        phases={
            "qkv_proj": "linear split_with_sizes view transpose view transpose view transpose",
            "mask": "alias bitwise_not",
            "sdpa": "scaled_dot_product_attention",
            "out_proj": "transpose view linear",
        },
    ),
    "hf-bert-eager-infer": Expected(
        backend="naive",
        scores=(3, 0),
        findings={"dispatch-bound", "sxs-materialized", "share-of-step"},
        phases={
            "qkv_proj": "linear view transpose linear view transpose linear view transpose",
            "qk_matmul": "transpose matmul",
            "scale": "mul",
            "softmax": "softmax",
            "dropout": "dropout",
            "av_matmul": "matmul",
            "out_proj": "transpose contiguous reshape linear dropout add layer_norm",
        },
    ),
    "hf-bert-eager-train": Expected(
        backend="naive",
        scores=(4, 1),
        findings={"sxs-materialized", "share-of-step"},
        phases={
            "qkv_proj": "linear view transpose linear view transpose linear view transpose",
            "qk_matmul": "transpose matmul",
            "scale": "mul",
            "softmax": "softmax",
            "dropout": "dropout",
            "av_matmul": "matmul",
            "out_proj": "transpose contiguous reshape linear dropout add layer_norm",
        },
    ),
    "hf-bert-sdpa-infer": Expected(
        backend="cpu-flash",
        findings={"dispatch-bound", "share-of-step"},
        phases={
            "qkv_proj": "linear view transpose linear view transpose linear view transpose",
            "sdpa": "scaled_dot_product_attention",
            "out_proj": "reshape transpose reshape linear dropout add layer_norm",
        },
    ),
    "hf-bert-sdpa-train": Expected(
        backend="sdpa-math",
        scores=(3, 2),
        causes="dropout",
        findings={"math-fallback", "sxs-materialized", "safe-softmax", "share-of-step"},
        phases={
            "qkv_proj": "linear view transpose linear view transpose linear view transpose",
            "sdpa": "scaled_dot_product_attention",
            "out_proj": "reshape transpose contiguous reshape linear dropout add layer_norm",
        },
    ),
    "hf-gpt2-eager-infer": Expected(
        backend="naive",
        scores=(4, 0),
        findings={"dispatch-bound", "sxs-materialized", "share-of-step"},
        phases={
            "qkv_proj": "view addmm view split view transpose view transpose view transpose",
            "other": "empty to lift_fresh detach_ empty to lift_fresh detach_",
            "kv_cache": "cat cat",
            "qk_matmul": "transpose matmul",
            "scale": "mul",
            "mask": "add",
            "softmax": "softmax to",
            "dropout": "dropout",
            "av_matmul": "matmul",
            "out_proj": "transpose reshape view addmm view dropout",
        },
    ),
    "hf-gpt2-eager-train": Expected(
        backend="naive",
        scores=(5, 1),
        findings={"dispatch-bound", "sxs-materialized", "share-of-step", "kv-cache-in-training"},
        phases={
            "qkv_proj": "view addmm view split view transpose view transpose view transpose",
            "other": "empty to lift_fresh detach_ empty to lift_fresh detach_",
            "kv_cache": "cat cat",
            "qk_matmul": "transpose matmul",
            "scale": "mul",
            "mask": "add",
            "softmax": "softmax to",
            "dropout": "dropout",
            "av_matmul": "matmul",
            "out_proj": "transpose reshape view addmm view dropout",
        },
    ),
    "hf-gpt2-sdpa-infer": Expected(
        backend="cpu-flash",
        findings={"dispatch-bound", "share-of-step"},
        phases={
            "qkv_proj": "view addmm view split view transpose view transpose view transpose",
            "other": "empty to lift_fresh detach_ empty to lift_fresh detach_",
            "kv_cache": "cat cat",
            "sdpa": "scaled_dot_product_attention",
            "out_proj": "reshape transpose reshape view addmm view dropout",
        },
    ),
    "hf-gpt2-sdpa-train": Expected(
        backend="sdpa-math",
        scores=(3, 5),
        causes="dropout",
        findings={"math-fallback", "sxs-materialized", "mask-rebuilt", "safe-softmax", "share-of-step",
                  "kv-cache-in-training"},
        phases={
            "qkv_proj": "view addmm view split view transpose view transpose view transpose",
            "other": "empty to lift_fresh detach_ empty to lift_fresh detach_",
            "kv_cache": "cat cat",
            "sdpa": "scaled_dot_product_attention",
            "out_proj": "reshape transpose contiguous reshape view addmm view dropout",
        },
    ),
    "hf-llama-eager-infer": Expected(
        backend="naive",
        scores=(4, 0),
        findings={"dispatch-bound", "sxs-materialized", "share-of-step"},
        phases={
            "qkv_proj": "linear view transpose linear view transpose linear view transpose",
            "rope": "unsqueeze unsqueeze mul slice slice neg cat mul add mul slice slice neg cat mul add",
            "other": "empty to lift_fresh detach_ empty to lift_fresh detach_",
            "kv_cache": "cat cat",
            "kv_expand": "unsqueeze expand reshape unsqueeze expand reshape",
            "qk_matmul": "transpose matmul",
            "scale": "mul",
            "mask": "add",
            "softmax": "softmax to",
            "dropout": "dropout",
            "av_matmul": "matmul",
            "out_proj": "transpose contiguous reshape linear",
        },
    ),
    "hf-llama-eager-train": Expected(
        backend="naive",
        scores=(5, 1),
        findings={"dispatch-bound", "sxs-materialized", "share-of-step", "kv-cache-in-training"},
        phases={
            "qkv_proj": "linear view transpose linear view transpose linear view transpose",
            "rope": "unsqueeze unsqueeze mul slice slice neg cat mul add mul slice slice neg cat mul add",
            "other": "empty to lift_fresh detach_ empty to lift_fresh detach_",
            "kv_cache": "cat cat",
            "kv_expand": "unsqueeze expand reshape unsqueeze expand reshape",
            "qk_matmul": "transpose matmul",
            "scale": "mul",
            "mask": "add",
            "softmax": "softmax to",
            "dropout": "dropout",
            "av_matmul": "matmul",
            "out_proj": "transpose contiguous reshape linear",
        },
    ),
    "hf-llama-sdpa-infer": Expected(
        backend="cpu-flash",
        findings={"dispatch-bound", "share-of-step"},
        phases={
            "qkv_proj": "linear view transpose linear view transpose linear view transpose",
            "rope": "unsqueeze unsqueeze mul slice slice neg cat mul add mul slice slice neg cat mul add",
            "other": "empty to lift_fresh detach_ empty to lift_fresh detach_",
            "kv_cache": "cat cat",
            "sdpa": "scaled_dot_product_attention",
            "out_proj": "reshape transpose reshape linear",
        },
    ),
    "hf-llama-sdpa-train": Expected(
        backend="sdpa-math",
        scores=(3, 5),
        causes="dropout",
        findings={"math-fallback", "sxs-materialized", "mask-rebuilt", "safe-softmax", "share-of-step",
                  "kv-cache-in-training"},
        phases={
            "qkv_proj": "linear view transpose linear view transpose linear view transpose",
            "rope": "unsqueeze unsqueeze mul slice slice neg cat mul add mul slice slice neg cat mul add",
            "other": "empty to lift_fresh detach_ empty to lift_fresh detach_",
            "kv_cache": "cat cat",
            "sdpa": "scaled_dot_product_attention",
            "out_proj": "reshape transpose contiguous reshape linear",
        },
    ),
    "torch-encoder-infer": Expected(
        backend="cpu-flash",
        findings={"dispatch-bound", "share-of-step"},
        phases={
            "qkv_proj": "transpose linear unflatten unsqueeze transpose squeeze contiguous select select "
                        "select view transpose view transpose view transpose view view view",
            "sdpa": "scaled_dot_product_attention",
            "out_proj": "permute reshape linear view transpose",
        },
    ),
    "torch-encoder-train": Expected(
        backend="sdpa-math",
        scores=(3, 5),
        causes="dropout",
        findings={"math-fallback", "sxs-materialized", "mask-rebuilt", "safe-softmax", "share-of-step"},
        phases={
            "qkv_proj": "transpose linear unflatten unsqueeze transpose squeeze contiguous select select "
                        "select view transpose view transpose view transpose view view view",
            "sdpa": "scaled_dot_product_attention",
            "out_proj": "permute reshape linear view transpose",
        },
    ),
    "torch-mha-infer": Expected(
        backend="naive",
        scores=(2, 2),
        findings={"mha-unfused", "sxs-materialized", "share-of-step"},
        phases={
            "mask": "zeros_like masked_fill_ view expand",
            "other": "_native_multi_head_attention to",
            "qkv_proj": "t reshape mm _unsafe_view _transform_bias_rescale_qkv view view",
            "qk_matmul": "transpose bmm view",
            "softmax": "_masked_softmax view view reshape",
            "av_matmul": "bmm",
            "out_proj": "view permute contiguous view view t addmm view",
        },
    ),
    "torch-mha-train": Expected(
        backend="sdpa-math",
        scores=(3, 3),
        causes="dropout",
        findings={"math-fallback", "sxs-materialized", "safe-softmax", "share-of-step"},
        phases={
            "mask": "zeros_like masked_fill_",
            "qkv_proj": "transpose linear unflatten unsqueeze transpose squeeze contiguous select select select "
                        "unsqueeze view transpose view transpose view transpose unsqueeze view view view",
            "sdpa": "scaled_dot_product_attention",
            "out_proj": "permute reshape linear view transpose",
        },
    ),
    "torch-mha-weights-infer": Expected(
        backend="naive",
        scores=(2, 2),
        findings={"mha-unfused", "sxs-materialized", "share-of-step"},
        phases={
            "mask": "zeros_like masked_fill_ view expand",
            "other": "_native_multi_head_attention to sum div_",
            "qkv_proj": "t reshape mm _unsafe_view _transform_bias_rescale_qkv view view",
            "qk_matmul": "transpose bmm view",
            "softmax": "_masked_softmax view view reshape",
            "av_matmul": "bmm",
            "out_proj": "view permute contiguous view view t addmm view",
        },
    ),
}
