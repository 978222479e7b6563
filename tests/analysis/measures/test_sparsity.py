"""A run's attention mask per layer (analysis/measures/sparsity.py): the entries read from run metadata (kept
shares given or counted from the spec, per-layer overrides, notes for unusable entries), and
``with_masks``'s ``LayerMask`` on hand-built summaries: the docstring's FLOP formulas
(dense 2·B·H·S²·(D + Dv), mask = dense × kept, compiled flex's kernel work and bytes) worked by hand,
and the summary given left unchanged."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from tb_attn_plugin.analysis.measures.sparsity import layer_masks, with_masks
from tb_attn_plugin.types.schema import Backward, LayerStats, PhaseStats, WorkerSummary

# The run: batch 2, 4 heads, 16 tokens, d_model 32, so a head size of 8.
B, H, S, D = 2, 4, 16, 8
CONFIG: dict[str, Any] = {"batch": B, "heads": H, "seq": S, "d_model": H * D, "dtype": "bfloat16"}
# q·kᵀ and probs·v over every pair: 2·B·H·S·S·D each, so 2·2·4·16·16·(8 + 8) = 65536.
DENSE = 2 * B * H * S * S * (D + D)


def _phase(phase: str, *, flops: float = 0.0, cpu_us: float = 0.0, device_us: float = 0.0,
           backward_calls: float = 0.0) -> PhaseStats:
    return PhaseStats(phase=phase, calls=1.0, cpu_us=cpu_us, cpu_self_us=cpu_us, device_us=device_us, kernels=0.0,
                      kernel_names=[], ops=[], flops=flops, flops_per_s=0.0, alloc_bytes=0.0, freed_bytes=0.0,
                      peak_bytes=0, sxs_bytes=0.0, sxs_allocs=0.0, backward=Backward(calls=backward_calls))


def _layer(layer: int, backend: str, phases: list[PhaseStats], *, calls: float = 1.0,
           score_shape: list[int] | None = None) -> LayerStats:
    return LayerStats(layer=layer, module=None, backend=backend, backend_evidence=[], inferred=False, calls=calls,
                      cpu_us=sum(p.cpu_us for p in phases), device_us=sum(p.device_us for p in phases),
                      flops=sum(p.flops for p in phases), flops_per_s=0.0, alloc_bytes=0.0, peak_bytes=0,
                      sxs_bytes=0.0, score_shape=score_shape or [], heads_count=None, phases=phases, heads=[],
                      backward=Backward())


def _worker(*layers: LayerStats, notes: list[str] | None = None) -> WorkerSummary:
    return WorkerSummary(file="w.1.pt.trace.json", worker="w", span=None, device="cpu", inferred=False,
                         backend="mixed", steps=[1], step_count=1, step_cpu_us=1000.0, step_device_us=0.0,
                         attention_cpu_us=0.0, attention_device_us=0.0, attention_share_cpu=None,
                         attention_share_device=None, layers=list(layers), per_step=[], diagnostics={},
                         notes=notes or ["an earlier note"])


def _naive(layer: int = 0) -> LayerStats:
    """Every pair computed: q·kᵀ and probs·v 32768 FLOPs each; the core 10 + 5 + 5 + 10 = 30 µs."""
    half = 2 * B * H * S * S * D
    return _layer(layer, "naive", [
        _phase("qkv_proj", flops=1e6, cpu_us=40.0),  # not the core: neither its FLOPs nor its time count
        _phase("qk_matmul", flops=half, cpu_us=10.0), _phase("mask", cpu_us=5.0), _phase("softmax", cpu_us=5.0),
        _phase("av_matmul", flops=half, cpu_us=10.0)])


def _flex(layer: int = 0, *, phase: str = "flex", calls: float = 2.0, flops: float = 0.0) -> LayerStats:
    """Compiled flex, two calls per step, training (its phase ran a backward), no FLOPs counted."""
    return _layer(layer, "flex", [_phase("block_mask", cpu_us=5.0),
                                  _phase(phase, flops=flops, cpu_us=50.0, backward_calls=calls)], calls=calls)


def _meta(mask: dict[str, Any] | None = None, **config: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"config": {**CONFIG, **config}}
    if mask is not None:
        meta["mask"] = mask
    return meta


# -- layer_masks ----------------------------------------------------------------------------------

def test_no_metadata_or_no_mask_gives_no_entries() -> None:
    assert layer_masks(None, [0, 1]) == {}
    assert layer_masks({}, [0, 1]) == {}
    assert layer_masks(_meta(), [0, 1]) == {}
    assert layer_masks(_meta({"spec": "sliding:4", "kept": 0.5}), []) == {}


def test_layer_overrides_replace_the_run_mask() -> None:
    mask = {"spec": "sliding:4", "kept": 0.25, "blocks": 0.5, "layers": {"1": {"spec": "causal", "kept": 0.53}}}
    out = layer_masks(_meta(mask), [0, 1, 2])
    assert out[0] == out[2] == {"spec": "sliding:4", "kept": 0.25, "blocks": 0.5}
    assert out[1] == {"spec": "causal", "kept": 0.53, "blocks": None}


@pytest.mark.parametrize(("spec", "causal", "pairs"), [
    # causal, W = 4 over 16: rows keep 1, 2, 3, 4 then 4 each: 10 + 12·4 = 58 pairs
    ("sliding:4", True, 58),
    # two-sided, W = 4: keys i-3..i+3 clipped: 4, 5, 6, then 7 ten times, 6, 5, 4 = 100 pairs
    ("sliding:4", False, 100),
    # 4 documents of 4 tokens, causal within each: 4 · (4·5/2) = 40 pairs
    ("document:4", True, 40),
    ("causal", True, 16 * 17 // 2),
])
def test_a_share_the_metadata_omits_is_counted_from_the_spec(spec: str, causal: bool, pairs: int) -> None:
    out = layer_masks(_meta({"spec": spec}, causal=causal), [0])
    assert out[0]["kept"] == pairs / S**2 and out[0]["spec"] == spec


def test_a_spec_is_read_in_its_normal_form() -> None:
    assert layer_masks(_meta({"spec": " SLIDING:4 ", "kept": 1}), [0])[0] == {"spec": "sliding:4", "kept": 1.0,
                                                                               "blocks": None}


@pytest.mark.parametrize(("mask", "config", "says"), [
    ({"spec": "bogus:1"}, {}, "the mask 'bogus:1' (unknown mask"),
    ({"spec": 7}, {}, "the mask 7 (not a mask spec)"),
    ({"spec": "sliding:4"}, {"seq": 0}, "(no kept share, and no sequence length in 1..2147483648 to count one)"),
    ({"spec": "sliding:4"}, {"seq": "16"}, "no sequence length"),
    ({"spec": "sliding:4", "kept": 1.5}, {}, "(a kept share of 1.5, not in (0, 1])"),
    ({"spec": "sliding:4", "kept": True}, {}, "(a kept share of True, not in (0, 1])"),
    ({"spec": "sliding:4", "kept": 0.5, "blocks": 0}, {}, "(a block share of 0, not in (0, 1])"),
])
def test_an_unusable_mask_is_ignored_with_a_note(mask: dict[str, Any], config: dict[str, Any], says: str) -> None:
    notes: list[str] = []
    assert layer_masks(_meta(mask, **config), [0, 1], notes) == {}
    (note,) = notes
    assert note.startswith("Run metadata ignored: ") and says in note and note.endswith(".")


def test_bad_layer_overrides_fall_back_to_the_run_mask_and_are_counted_in_one_note() -> None:
    mask = {"spec": "sliding:4", "kept": 0.25, "layers": {"0": {"spec": "nope"}, "1": {"spec": "causal", "kept": 2},
                                                          "2": "not an entry"}}
    notes: list[str] = []
    out = layer_masks(_meta(mask), [0, 1, 2], notes)
    assert {k: v["spec"] for k, v in out.items()} == {0: "sliding:4", 1: "sliding:4", 2: "sliding:4"}
    (note,) = notes
    assert "the mask of layer 0 'nope'" in note and note.endswith("(and 1 more).")  # layer 1's share, too


def test_a_mask_that_is_not_a_mapping_is_no_mask() -> None:
    notes: list[str] = []
    assert layer_masks({"mask": "sliding:4", "config": CONFIG}, [0], notes) == {} and notes == []


# -- with_masks -----------------------------------------------------------------------------------

def test_without_metadata_or_mask_the_summary_itself_comes_back() -> None:
    w = _worker(_naive(), _flex(1))
    assert with_masks(w, None) is w
    assert with_masks(w, {}) is w
    assert with_masks(w, _meta()) is w  # causal, no mask: nothing to count


def test_naive_attention_is_dense_work_worked_by_hand() -> None:
    w = _worker(_naive())
    before = msgspec.json.encode(w)
    out = with_masks(w, _meta({"spec": "sliding:4", "kept": 0.25}))
    assert msgspec.json.encode(w) == before and w.layers[0].mask is None  # the given summary is unchanged
    m = out.layers[0].mask
    assert m is not None and (m.spec, m.kept, m.blocks) == ("sliding:4", 0.25, None)
    assert DENSE == 65536 and m.dense_flops == DENSE
    assert m.mask_flops == DENSE * 0.25  # 16384: what the mask asks for
    assert m.work_flops == DENSE  # 32768 + 32768 counted: every score computed
    assert m.dense_work and m.core_us == 30.0 and m.dense_equiv_us == 30.0  # dense work at its rate: itself
    assert not m.local
    assert out.notes == ["an earlier note"] and out.layers[0].flops == w.layers[0].flops


def test_a_fused_causal_kernel_is_not_dense_work() -> None:
    # The flash kernel's causal half: DENSE · 17/32 = 34816 FLOPs, under 80 % of DENSE (52428.8).
    work = DENSE * (S + 1) / (2 * S)
    layer = _layer(0, "flash", [_phase("sdpa", flops=work, cpu_us=90.0, device_us=17.0)])
    m = with_masks(_worker(layer), _meta({"spec": "sliding:4", "kept": 0.25})).layers[0].mask
    assert m is not None and m.work_flops == work and not m.dense_work
    # The core's device time (17 µs, not its CPU time) scaled to the dense work: 17 · 65536 / 34816 = 32 µs.
    assert m.core_us == 17.0 and m.dense_equiv_us == pytest.approx(32.0)


def test_compiled_flex_gets_the_masks_work_and_its_kernels_bytes_worked_by_hand() -> None:
    layer = _flex()
    w = _worker(layer)
    before = msgspec.json.encode(w)
    out = with_masks(w, _meta({"spec": "sliding:4", "kept": 0.25, "blocks": 0.5}))
    assert msgspec.json.encode(w) == before  # the given summary, its layer and phases unchanged
    got = out.layers[0]
    m = got.mask
    wanted = DENSE * 0.25  # 16384 FLOPs per call
    assert m is not None and m.work_flops == wanted and m.mask_flops == wanted and not m.dense_work
    # Compiled flex computes whole blocks: its time scales with the blocks, 50 µs / 0.5 = 100 µs.
    assert m.core_us == 50.0 and m.dense_equiv_us == 100.0 and m.blocks == 0.5
    (_, flex) = got.phases
    assert flex.flops == wanted * 2  # two calls per step: 32768
    assert flex.backward.flops == 2.5 * wanted * 2  # 81920: the fused backward's factor
    # Q, K, V and O per call, B·H·S·D bf16 elements each: 4 · 2·4·16·8 · 2 B = 8192 B, twice: 16384 B.
    assert flex.bytes == 4 * B * H * S * D * 2 * 2 == 16384 and flex.dtype == "bf16"
    assert flex.flops_per_s == pytest.approx(32768 / 50e-6)
    assert got.flops == 32768 and got.bytes == 16384 and got.backward.flops == 81920
    assert got.phases[0] == layer.phases[0]  # the block mask's phase is not the kernel's
    assert layer.phases[1].flops == 0.0 and layer.mask is None  # the given layer is unchanged


def test_compiled_flex_without_a_known_dtype_moves_no_modeled_bytes() -> None:
    out = with_masks(_worker(_flex()), _meta({"spec": "sliding:4", "kept": 0.25}, dtype="float64"))
    flex = out.layers[0].phases[1]
    assert flex.flops == DENSE * 0.25 * 2 and flex.bytes == 0.0 and flex.dtype is None


def test_compiled_flex_inferred_without_scopes_adds_to_its_compiled_phase() -> None:
    out = with_masks(_worker(_flex(phase="compiled")), _meta({"spec": "causal", "kept": 0.5}, dtype="float32"))
    compiled = out.layers[0].phases[1]
    # 65536 · 0.5 = 32768 FLOPs a call, twice; fp32: 4 · 1024 elements · 4 B · 2 calls = 32768 B.
    assert compiled.flops == 65536 and compiled.bytes == 32768 and compiled.dtype == "fp32"


def test_compiled_flex_whose_ops_show_its_work_gets_nothing_added() -> None:
    # Already 80 % of the mask's work counted (13107.2 of 16384 a call): the ops show the kernel.
    layer = _flex(flops=0.8 * DENSE * 0.25 * 2)
    out = with_masks(_worker(layer), _meta({"spec": "sliding:4", "kept": 0.25}))
    assert out.layers[0].phases == layer.phases and out.layers[0].flops == layer.flops
    m = out.layers[0].mask
    assert m is not None and m.work_flops == pytest.approx(0.8 * DENSE * 0.25)
    # No blocks given: the time scales with the pairs, 50 · 65536 / 13107.2 = 250 µs.
    assert m.dense_equiv_us == pytest.approx(250.0)


def test_flex_without_a_flex_phase_adds_its_work_to_the_layer_only() -> None:
    layer = _layer(0, "flex", [_phase("qkv_proj", cpu_us=10.0)], calls=1.0)
    got = with_masks(_worker(layer), _meta({"spec": "sliding:4", "kept": 0.25})).layers[0]
    assert got.flops == DENSE * 0.25 and got.phases == layer.phases and got.bytes == 0.0
    assert got.backward.flops == 0.0  # no phase ran a backward to carry it


def test_a_run_that_is_not_causal_and_has_no_mask_counts_flexs_dense_work() -> None:
    naive = _naive(1)
    out = with_masks(_worker(_flex(), naive), _meta(causal=False))
    flex = out.layers[0]
    assert flex.mask is None and flex.phases[1].flops == DENSE * 2  # every pair, two calls
    assert flex.phases[1].backward.flops == 2.5 * DENSE * 2
    assert out.layers[1] is naive  # its ops show its work already
    unchanged = _worker(_naive())
    assert with_masks(unchanged, _meta(causal=False)) is unchanged


def test_the_layers_own_score_shape_gives_batch() -> None:
    layer = msgspec.structs.replace(_naive(), score_shape=[1, H, S, S])
    m = with_masks(_worker(layer), _meta({"spec": "sliding:4", "kept": 0.25})).layers[0].mask
    # B = 1 from the shape (the config says 2): 2·1·4·16·16·(8 + 8) = 32768.
    assert m is not None and m.dense_flops == 2 * 1 * H * S * S * (D + D) == 32768


def test_a_tensor_parallel_ranks_heads_keep_the_runs_head_size() -> None:
    # A rank of a two-way tensor-parallel run holds 2 of the 4 heads: its scores are (2, 2, 16, 16),
    # and its naive ops computed every pair of its heads, 2·2·2·16·16·8 = 16384 FLOPs each matmul.
    half = 2 * B * 2 * S * S * D
    layer = _layer(0, "naive", [_phase("qk_matmul", flops=half, cpu_us=10.0),
                                _phase("av_matmul", flops=half, cpu_us=10.0)], score_shape=[B, 2, S, S])
    m = with_masks(_worker(layer), _meta({"spec": "sliding:4", "kept": 0.25}, parallel="tp")).layers[0].mask
    # The head size stays d_model / heads = 32 / 4 = 8: dense = 2·2·2·16·16·(8 + 8) = 32768, all of it done.
    assert m is not None and m.dense_flops == 2 * B * 2 * S * S * (D + D) == 32768
    assert m.dense_work


def test_the_configs_own_head_dim_is_the_head_size() -> None:
    # Gemma-style: a head size of 16 whatever d_model / heads (8) says: 2·2·4·16·16·(16 + 16) = 131072.
    m = with_masks(_worker(_naive()), _meta({"spec": "sliding:4", "kept": 0.25}, head_dim=16)).layers[0].mask
    assert m is not None and m.dense_flops == 2 * B * H * S * S * (16 + 16) == 131072


def test_mixed_masks_mark_the_narrower_layers_local() -> None:
    mask = {"spec": "sliding:4", "kept": 0.25, "layers": {"1": {"spec": "causal", "kept": 0.53}}}
    out = with_masks(_worker(_naive(0), _naive(1)), _meta(mask))
    assert [(x.mask.spec, x.mask.local) for x in out.layers if x.mask] == [("sliding:4", True), ("causal", False)]


def test_calls_of_zero_count_as_one() -> None:
    layer = _flex(calls=0.0)
    got = with_masks(_worker(layer), _meta({"spec": "sliding:4", "kept": 0.25})).layers[0]
    assert got.mask is not None and got.mask.work_flops == DENSE * 0.25 and got.phases[1].flops == DENSE * 0.25


@pytest.mark.parametrize("config", [
    {"heads": 3},  # 32 is not a multiple of 3 heads
    {"batch": True},
    {"seq": 16.0},
    {"d_model": 0},
    {"batch": 1 << 32},
    {"head_dim": 8.0},
])
def test_config_shapes_that_cannot_be_believed_give_no_mask(config: dict[str, Any]) -> None:
    w = _worker(_naive())
    out = with_masks(w, _meta({"spec": "sliding:4", "kept": 0.25}, **config))
    assert out is w and out.layers[0].mask is None


def test_an_unusable_mask_adds_its_note_to_a_new_summary() -> None:
    w = _worker(_naive())
    out = with_masks(w, _meta({"spec": "sliding:4", "kept": 3}))
    assert out is not w and out.layers[0].mask is None
    assert out.notes[0] == "an earlier note" and out.notes[1].startswith("Run metadata ignored")
    assert w.notes == ["an earlier note"]
