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
- DeepSeek-V3 (MLA): ``q_a_proj``, its RMSNorm in pieces (``to pow mean add rsqrt mul to mul``),
  ``q_b_proj`` and the head split with ``split_with_sizes`` (q's rotary and other parts), then
  ``kv_a_proj_with_mqa``, its split, its norm and ``view view`` of the latent and the rotary key:
  all q, k and v's making. RoPE on interleaved pairs: the tables' ``slice unsqueeze`` twice, q's
  and k's even and odd ``slice``, then ``mul mul sub mul mul add cat`` for q and for k (no
  ``neg``). The cache appends the latent and the rotary key (``cat cat``, after its
  bookkeeping); the third ``cat`` joins q's two parts (``torch.cat((q_pass, q_rot))``): a cat's
  dimension is not decoded, so it reads as a third append. ``kv_b_proj`` expands the cached
  latent into k and v after the cache (``linear view transpose split_with_sizes``); the rotary
  key is ``expand``ed to every head, and each key is assembled by copies into a ``new_empty``
  tensor (``slice copy_`` twice: the copy phase; the allocation is bookkeeping).
- Gemma 3: the QK-norm is RMSNorm in pieces ending in ``1 + weight`` and ``type_as``
  (``to pow mean add rsqrt mul to add mul type_as``), once for q, once for k; the sliding
  layer's cache slices its window (``slice slice``) after its appends; one KV head reaches SDPA
  with ``enable_gqa`` (no ``repeat_kv`` in the block).
- BART: the decoder runs the batch's first 24 tokens (the runner's seq2seq step), its
  cross-attention's q projects those 2 x 24 rows and k and v the encoder's 2 x 48; in inference
  both decoder attentions append to their caches (``cat cat`` after the bookkeeping).
- FLOPs (``flops``) as the configs give them: B = 2, S = 48 (the decoder's 24), d = 128, H = 4;
  a linear 2·rows·in·out; SDPA's math backend the two matmuls unmasked, 2·B·H·S²·(Dqk + Dv); the
  CPU flash kernel the causal half, (S + 1) / 2S of it, where causal.
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
    more_phases: dict[int, dict[str, str]] | None = None  # other layers' first blocks, as ``phases``
    flops: dict[int, dict[str, int]] | None = None  # layer -> phase -> forward FLOPs per step, the phases with any


#: The corpus's HF sizes (``--size tiny --seq 48 --batch 2``): tokens per forward, model width, heads.
_T, _D, _H, _S, _B = 2 * 48, 128, 4, 48, 2
#: DeepSeek-V3's MLA at tiny (``runner.models``): q's rank d/2, the latent's d/4, heads of 32 = 24 + 8
#: rotary for q and k, 32 for v.
_Q_RANK, _KV_RANK, _ROPE, _NOPE, _V = _D // 2, _D // 4, 8, 24, 32
#: BART's decoder: the first half of the batch's tokens.
_T_DEC, _S_DEC = 2 * 24, 24

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
    "hf-deepseek-v3-sdpa-train": Expected(
        backend="sdpa-math",
        scores=(3, 5),
        causes="dropout",
        findings={"math-fallback", "sxs-materialized", "mask-rebuilt", "safe-softmax", "share-of-step",
                  "kv-cache-in-training", "far-from-roof"},
        phases={
            "qkv_proj": "linear to pow mean add rsqrt mul to mul linear view transpose split_with_sizes "
                        "linear split_with_sizes to pow mean add rsqrt mul to mul view view "
                        "linear view transpose split_with_sizes",
            "rope": "slice unsqueeze slice unsqueeze slice slice slice slice "
                    "mul mul sub mul mul add cat mul mul sub mul mul add cat",
            "other": "empty to lift_fresh detach_ empty to lift_fresh detach_ new_empty",
            "kv_cache": "cat cat cat",
            "kv_expand": "expand",
            "copy": "slice copy_ slice copy_",
            "sdpa": "scaled_dot_product_attention",
            "out_proj": "reshape transpose contiguous reshape linear",
        },
        flops={layer: {
            # q_a, q_b; kv_a (the latent and the rotary key), kv_b (k's other part and v, per head)
            "qkv_proj": 2 * _T * (_D * _Q_RANK + _Q_RANK * _H * (_NOPE + _ROPE) + _D * (_KV_RANK + _ROPE)
                                  + _KV_RANK * _H * (_NOPE + _V)),
            "sdpa": 2 * _B * _H * _S * _S * ((_NOPE + _ROPE) + _V),
            "out_proj": 2 * _T * _H * _V * _D,
        } for layer in (0, 1)},
    ),
    "hf-gemma3-mqa-sdpa-train": Expected(
        backend="sdpa-math",
        scores=(3, 5),
        causes="dropout",
        findings={"math-fallback", "sxs-materialized", "mask-rebuilt", "safe-softmax", "share-of-step",
                  "kv-cache-in-training", "far-from-roof"},
        phases={
            "qkv_proj": "linear view transpose linear view transpose linear view transpose "
                        "to pow mean add rsqrt mul to add mul type_as to pow mean add rsqrt mul to add mul type_as",
            "rope": "unsqueeze unsqueeze mul slice slice neg cat mul add mul slice slice neg cat mul add",
            "other": "empty to lift_fresh detach_ empty to lift_fresh detach_ to",
            "kv_cache": "cat cat slice slice",
            "sdpa": "scaled_dot_product_attention",
            "out_proj": "reshape transpose contiguous reshape linear",
        },
        flops={layer: {
            "qkv_proj": 2 * _T * _D * (_H + 1 + 1) * (_D // _H),  # q: 4 heads; k and v: one KV head
            "sdpa": 2 * _B * _H * _S * _S * 2 * (_D // _H),
            "out_proj": 2 * _T * _D * _D,
        } for layer in (0, 1)},
    ),
    "hf-bart-sdpa-infer": Expected(
        backend="cpu-flash",
        findings={"share-of-step", "far-from-roof", "dispatch-bound"},
        phases={
            "qkv_proj": "linear view transpose linear linear view transpose view transpose",
            "sdpa": "scaled_dot_product_attention",
            "out_proj": "reshape transpose reshape linear",
        },
        more_phases={layer: {  # the decoder's self- (2) and cross-attention (3): each appends to its cache
            "qkv_proj": "linear view transpose linear linear view transpose view transpose",
            "other": "empty to lift_fresh detach_ empty to lift_fresh detach_",
            "kv_cache": "cat cat",
            "sdpa": "scaled_dot_product_attention",
            "out_proj": "reshape transpose reshape linear",
        } for layer in (2, 3)},
        flops={
            0: {"qkv_proj": 3 * 2 * _T * _D * _D, "sdpa": 2 * _B * _H * _S * _S * 2 * (_D // _H),
                "out_proj": 2 * _T * _D * _D},
            # causal: the CPU flash kernel's (S + 1) / 2S of the square
            2: {"qkv_proj": 3 * 2 * _T_DEC * _D * _D,
                "sdpa": 2 * _B * _H * _S_DEC * _S_DEC * 2 * (_D // _H) * (_S_DEC + 1) // (2 * _S_DEC),
                "out_proj": 2 * _T_DEC * _D * _D},
            # q from the decoder's rows, k and v from the encoder's
            3: {"qkv_proj": 2 * _T_DEC * _D * _D + 2 * 2 * _T * _D * _D,
                "sdpa": 2 * _B * _H * _S_DEC * _S * 2 * (_D // _H), "out_proj": 2 * _T_DEC * _D * _D},
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
