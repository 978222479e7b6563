"""PyTorch Lightning's profiler, as a user runs it: a tiny Llama (2 layers, width 128, 4 query heads
of 32 and 2 KV heads, built from its config: nothing is downloaded) in a LightningModule, fitted
for 6 steps by ``Trainer(profiler=PyTorchProfiler(...))`` with its defaults (``record_module_names``
on), profiling steps 3 and 4 (``schedule(wait=1, warmup=1, active=2)``), in SDPA and in eager
attention. Inference must find the layers from Lightning's module labels, and say what the scopes
of ``runner.instrument()`` around the same fit say.

What was read in the traces (torch 2.13, transformers 5.25, Lightning 2.6), so that a change of
expectation is a change of reading:

- Every submodule's forward is a ``user_annotation``
  ``[pl][module]<module>.<Class>: <path>``, the path relative to the LightningModule:
  ``...LlamaDecoderLayer: model.model.layers.0`` holds ``...LlamaRMSNorm: ...input_layernorm``,
  ``...LlamaAttention: model.model.layers.0.self_attn`` (which holds ``...Linear: ...q_proj``,
  ``k_proj``, ``v_proj`` and ``o_proj``, each around its ``aten::linear``; RoPE, the KV cache's
  ``cat`` and the core sit directly in the attention's label) and ``...LlamaMLP: ...mlp``.
- Lightning's ``[pl][profile]run_training_batch`` (and ``optimizer_step``, ``Optimizer.step#SGD.step``)
  start in one ``ProfilerStep#N`` and end in the next: the forward runs inside them, after the
  previous step's backward, and no longer nests in the step it starts in.
- With ``instrument()`` (hooks registered before Lightning's), the block scope
  ``tbattn.v1/L0 model.layers.0.self_attn`` opens before Lightning's attention label and closes
  before it too: the two overlap without nesting.
- With ``with_stack=True`` each module's ``nn.Module: LlamaAttention_0`` event holds its label
  (Lightning's hooks run inside the module's call).
- Transformers 5.25 makes a ``DynamicCache`` in training too: each attention appends K and V to
  empty tensors (``kv_cache``), and the ``kv-cache-in-training`` finding says so, scoped or not.
"""

from __future__ import annotations

import contextlib
import json
import warnings
from pathlib import Path
from typing import Any

import msgspec
import pytest
import torch

from runner.instrument import instrument
from tb_attn_plugin.analysis.attribution.analyze import analyze
from tb_attn_plugin.analysis.summary import summarize_trace
from tb_attn_plugin.engine.loader import load_events
from tb_attn_plugin.trace.kineto import LIGHTNING_MODULE_PREFIX
from tb_attn_plugin.types.schema import WorkerSummary

pl = pytest.importorskip("pytorch_lightning")
transformers = pytest.importorskip("transformers")
profilers = pytest.importorskip("pytorch_lightning.profilers")

B, S, WIDTH, HEADS, KV_HEADS, LAYERS = 2, 16, 128, 4, 2, 2
HEAD = WIDTH // HEADS
QKV_FLOPS = 2 * B * S * WIDTH * (HEADS + 2 * KV_HEADS) * HEAD
OUT_FLOPS = 2 * B * S * WIDTH * WIDTH
#: q·kᵀ and attn·v over the causal triangle (the CPU flash kernel skips the masked half).
SDPA_FLOPS = 2 * B * HEADS * (S * (S + 1) // 2) * (HEAD + HEAD)
#: Eager attention computes the whole S x S scores, then masks them.
MATMUL_FLOPS = 2 * B * HEADS * S * S * HEAD
COUNTED = ("qkv_proj", "qk_matmul", "av_matmul", "sdpa", "out_proj")
PATHS = [f"model.model.layers.{k}.self_attn" for k in range(LAYERS)]


class _Llama(pl.LightningModule):  # type: ignore[misc]
    def __init__(self, impl: str) -> None:
        super().__init__()
        config = transformers.LlamaConfig(hidden_size=WIDTH, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                                          num_key_value_heads=KV_HEADS, intermediate_size=4 * WIDTH, vocab_size=1024,
                                          attn_implementation=impl)
        self.model = transformers.LlamaForCausalLM(config)

    def training_step(self, batch: list[torch.Tensor], _: int) -> torch.Tensor:
        (ids,) = batch
        loss: torch.Tensor = self.model(input_ids=ids, labels=ids).loss
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=1e-3)


def _fit(out: Path, impl: str, *, scoped: bool = False, with_stack: bool = False) -> Path:
    """One fit under Lightning's profiler; its trace file."""
    torch.manual_seed(0)
    module = _Llama(impl)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randint(0, 1024, (32, S))),
                                       batch_size=B)
    profiler = profilers.PyTorchProfiler(dirpath=str(out), record_shapes=True, profile_memory=True,
                                         with_stack=with_stack,
                                         schedule=torch.profiler.schedule(wait=1, warmup=1, active=2))
    trainer = pl.Trainer(max_steps=6, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, profiler=profiler,
                         default_root_dir=str(out))
    with warnings.catch_warnings(), (instrument(module.model) if scoped else contextlib.nullcontext()):
        warnings.simplefilter("ignore")
        trainer.fit(module, data)
    (path,) = out.glob("*.pt.trace.json")
    return path


def _summary(path: Path) -> WorkerSummary:
    return summarize_trace(analyze(load_events(str(path))), file=path.name, worker="w", span=None)


CASES = [("sdpa", False, False), ("sdpa", True, False), ("eager", False, False), ("eager", True, False),
         ("sdpa", False, True)]


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, bool, bool], Path]:
    """(implementation, scoped, with_stack) -> the fit's trace, about a second each."""
    out = tmp_path_factory.mktemp("lightning")
    return {case: _fit(out / "-".join(map(str, case)), case[0], scoped=case[1], with_stack=case[2])
            for case in CASES}


def _flops(layer: Any) -> dict[str, float]:
    return {p.phase: p.flops for p in layer.phases if p.phase in COUNTED}


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_lightnings_labels_name_the_layers_of_inferred_attention(
        traces: dict[tuple[str, bool, bool], Path], impl: str) -> None:
    summary = _summary(traces[(impl, False, False)])
    assert summary.inferred and len(summary.steps) == 2
    assert [(layer.layer, layer.module, layer.core_only) for layer in summary.layers] == [
        (0, PATHS[0], False), (1, PATHS[1], False)]
    core = {"sdpa": SDPA_FLOPS} if impl == "sdpa" else {"qk_matmul": MATMUL_FLOPS, "av_matmul": MATMUL_FLOPS}
    for layer in summary.layers:
        assert layer.backend == ("cpu-flash" if impl == "sdpa" else "naive")
        assert layer.calls == 1  # one forward per profiled step
        assert _flops(layer) == {"qkv_proj": QKV_FLOPS, "out_proj": OUT_FLOPS, **core}


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_inference_says_what_the_scopes_say(traces: dict[tuple[str, bool, bool], Path], impl: str) -> None:
    """The same layers, backends, phases and FLOPs per phase as ``instrument()`` around the same fit
    (its module paths are relative to the model it was given: one ``model.`` fewer)."""
    plain, scoped = _summary(traces[(impl, False, False)]), _summary(traces[(impl, True, False)])
    assert plain.inferred and not scoped.inferred
    assert [layer.module for layer in scoped.layers] == [p.removeprefix("model.") for p in PATHS]
    for got, want in zip(plain.layers, scoped.layers, strict=True):
        assert (got.layer, got.backend, got.calls) == (want.layer, want.backend, want.calls)
        assert [p.phase for p in got.phases] == [p.phase for p in want.phases]
        assert _flops(got) == _flops(want)


def test_module_events_and_labels_of_one_module_are_one_block(traces: dict[tuple[str, bool, bool], Path]) -> None:
    """``with_stack``: each attention is an ``nn.Module`` event and, inside it, Lightning's label."""
    events = json.loads(traces[("sdpa", False, True)].read_text())["traceEvents"]
    assert {"nn.Module: LlamaAttention_0", "nn.Module: LlamaAttention_1"} <= {e.get("name") for e in events}
    with_stack, plain = _summary(traces[("sdpa", False, True)]), _summary(traces[("sdpa", False, False)])
    assert [(layer.layer, layer.module, layer.backend, layer.core_only, _flops(layer)) for layer in with_stack.layers] \
        == [(layer.layer, layer.module, layer.backend, layer.core_only, _flops(layer)) for layer in plain.layers]


def test_a_scoped_trace_is_read_as_without_lightnings_labels(traces: dict[tuple[str, bool, bool], Path],
                                                             tmp_path: Path) -> None:
    """Scopes win: the trace with its labels is summarized exactly as the same file without them.
    Read with them, the attention's ops would sit in a label the block scope does not enclose."""
    path = traces[("sdpa", True, False)]
    doc = json.loads(path.read_text())
    spans = {e["name"]: (e["ts"], e["ts"] + e["dur"]) for e in doc["traceEvents"] if e.get("ph") == "X"}
    attention = f"{LIGHTNING_MODULE_PREFIX}transformers.models.llama.modeling_llama.LlamaAttention: {PATHS[0]}"
    block, label = spans["tbattn.v1/L0 model.layers.0.self_attn"], spans[attention]
    assert block[0] < label[0] < block[1] < label[1]  # overlapping, not nested (the last call of each)
    doc["traceEvents"] = [e for e in doc["traceEvents"]
                          if not str(e.get("name", "")).startswith(LIGHTNING_MODULE_PREFIX)]
    bare = tmp_path / path.name
    bare.write_text(json.dumps(doc))
    assert msgspec.json.encode(_summary(path)) == msgspec.json.encode(_summary(bare))
