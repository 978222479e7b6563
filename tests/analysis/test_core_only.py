"""Real traces in which only an attention block's core can be found (issue 32): a bare
``F.scaled_dot_product_attention`` on random tensors, and a module whose q, k and v come from
``torch.einsum`` with its parameters (no ``linear``, ``addmm`` or ``mm``: nothing ``extent.widen``
takes for a projection). Every figure then covers the core only, and says so: the layers are
``core_only``, the notes say why, and the headline and ``share-of-step`` speak of the attention
core. A core with its output projection but no q, k or v projection (made elsewhere) is core only
too, and the notes say which side it missed. A plain trace of the built-in transformer, whose
blocks are widened to their projections, is not core only.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from helpers import bare_sdpa, profile_run, profile_script
from torch import nn

from devtools.corpus import TRACES as CORPUS
from tb_attn_plugin.analysis.attribution.analyze import analyze
from tb_attn_plugin.analysis.attribution.inference.extent import MISSING_BEFORE, MISSING_BOTH
from tb_attn_plugin.analysis.summary import summarize, summarize_trace
from tb_attn_plugin.cli.report import summary_csv, summary_table
from tb_attn_plugin.engine.loader import load_events
from tb_attn_plugin.types.schema import Finding, RunSummary, WorkerSummary

B, H, S, D = 2, 4, 32, 16
CALLS = 3  # attention calls per step: three layers each


class EinsumAttention(nn.Module):
    """q, k, v and the output projected by ``einsum`` with parameters, no ``nn.Linear``."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Parameter(torch.randn(3, H * D, H, D) / D)
        self.out = nn.Parameter(torch.randn(H, D, H * D) / D)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = (torch.einsum("bsm,mhd->bhsd", x, w) for w in self.qkv)
        probs = torch.softmax(q @ k.transpose(-2, -1) / D**0.5, dim=-1)
        return torch.einsum("bhsd,hdm->bsm", probs @ v, self.out)


def _summary(path: Path) -> WorkerSummary:
    return summarize_trace(analyze(load_events(str(path))), file=path.name, worker="w", span=None)


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, WorkerSummary]:
    torch.manual_seed(0)
    layers = [EinsumAttention() for _ in range(CALLS)]
    x = torch.randn(B, S, H * D)

    @torch.no_grad()
    def einsum_step() -> None:
        y = x
        for layer in layers:
            y = y + layer(y)

    w_qkv, w_out = torch.randn(3 * H * D, H * D) / D, torch.randn(H * D, H * D) / D
    bare = [torch.randn(B, H, S, D) for _ in range(3)]

    @torch.no_grad()
    def mixed_step() -> None:
        """A block with its projections (layer 0), then a bare core (layer 1)."""
        q, k, v = F.linear(x, w_qkv).view(B, S, 3, H, D).permute(2, 0, 3, 1, 4)
        y = F.linear(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(B, S, H * D), w_out)
        F.scaled_dot_product_attention(*bare) + y.sum()

    @torch.no_grad()
    def one_side_step() -> None:
        """Cores on q, k and v made elsewhere, each followed by its head merge and output projection."""
        for _ in range(CALLS):
            F.linear(F.scaled_dot_product_attention(*bare).transpose(1, 2).reshape(B, S, H * D), w_out)

    out = {name: _summary(profile_script(tmp_path_factory.mktemp(name), step))
           for name, step in (("sdpa", lambda: bare_sdpa(CALLS, (B, H, S, D))), ("einsum", einsum_step),
                              ("mixed", mixed_step), ("one-side", one_side_step))}
    result = profile_run(tmp_path_factory.mktemp("plain"), "plain", impl="naive", mode="inference", scopes=False)
    assert result.status == "ok", result.error
    (path,) = result.traces
    out["plain"] = _summary(path)
    return out


def _share(s: WorkerSummary) -> Finding:
    return next(f for f in s.findings if f.id == "share-of-step")


@pytest.mark.parametrize(("name", "backend", "core"), [("sdpa", "cpu-flash", ("sdpa",)),
                                                       ("einsum", "naive", ("qk_matmul", "softmax", "av_matmul"))])
def test_a_block_found_by_its_core_alone_says_so(traces: dict[str, WorkerSummary], name: str, backend: str,
                                                 core: tuple[str, ...]) -> None:
    s = traces[name]
    assert s.inferred and [layer.layer for layer in s.layers] == list(range(CALLS))
    for layer in s.layers:
        assert layer.core_only and layer.backend == backend, (name, layer.layer)
        phases = {p.phase for p in layer.phases}
        assert set(core) <= phases and not phases & {"qkv_proj", "out_proj"}, phases
    share = _share(s)
    assert share.title.startswith("The attention core takes ") and "layers: the core only" not in share.title
    assert "No q, k, v or output projection was found" in share.explanation
    assert "Making the attention core twice as fast" in share.explanation
    assert share.evidence.details["core_only_layers"] == CALLS
    assert s.headline.startswith("The attention core is ")
    assert " attention" not in s.headline.replace("attention core", "")
    assert f"Layers 0-2: the attention core only ({MISSING_BOTH})" in s.notes


def test_a_core_widened_on_one_side_is_core_only_and_says_which_side_it_missed(
        traces: dict[str, WorkerSummary]) -> None:
    """The output projection is the block's, but no q, k or v projection was found: the figures leave
    them out, so the layer is not a whole block."""
    s = traces["one-side"]
    assert [(layer.layer, layer.core_only) for layer in s.layers] == [(k, True) for k in range(CALLS)]
    for layer in s.layers:
        flops = {p.phase: p.flops for p in layer.phases}
        assert flops["out_proj"] == 2 * B * S * (H * D) * (H * D) and "qkv_proj" not in flops
    assert s.notes == ["no tb-attn scopes in this trace: attention was inferred from module names and op patterns",
                       f"Layers 0-2: the attention core only ({MISSING_BEFORE})"]


def test_a_block_widened_to_its_projections_is_not_core_only(traces: dict[str, WorkerSummary]) -> None:
    s = traces["plain"]
    assert s.inferred and s.layers and not any(layer.core_only for layer in s.layers)
    assert all({"qkv_proj", "out_proj"} <= {p.phase for p in layer.phases} for layer in s.layers)
    share = _share(s)
    assert share.title.startswith("Attention takes ") and "core" not in share.title + share.explanation
    assert share.evidence.details["core_only_layers"] == 0
    assert s.headline.startswith("Attention is ") and "core" not in s.headline.split(".")[0]


def test_where_some_layers_are_their_core_alone_the_finding_says_how_many(traces: dict[str, WorkerSummary]) -> None:
    s = traces["mixed"]
    assert [(layer.layer, layer.core_only) for layer in s.layers] == [(0, False), (1, True)]
    assert {"qkv_proj", "out_proj"} <= {p.phase for p in s.layers[0].phases}
    share = _share(s)
    assert share.title.startswith("Attention takes ") and share.title.endswith(" (1 of 2 layers: the core only)")
    assert "In layer 1 only the core was found" in share.explanation
    assert share.evidence.details["core_only_layers"] == 1
    assert "per step, 1 of 2 layers: the core only)" in s.headline
    assert s.notes[1:] == [f"Layer 1: the attention core only ({MISSING_BOTH})"]


PLAIN = sorted(CORPUS.glob("*-plain/**/*.pt.trace.json*"))


@pytest.mark.parametrize("path", PLAIN, ids=[p.relative_to(CORPUS).parts[0] for p in PLAIN])
def test_no_real_models_block_is_core_only(path: Path) -> None:
    """The model corpus profiled without scopes (Hugging Face, PyTorch's encoder and
    MultiheadAttention, whose inference fast path is one op holding its projections): every block
    is widened to its projections, or holds them."""
    s = summarize(load_events(str(path)))
    assert s.inferred and s.layers and not any(layer.core_only for layer in s.layers)


def test_the_cli_says_attention_core(traces: dict[str, WorkerSummary]) -> None:
    for name, what in (("sdpa", "attention core"), ("plain", "attention")):
        w = traces[name]
        run = RunSummary(run=name, metadata=None, workers=[w], errors=[])
        assert f", {what} {w.attention_share_cpu:.1%} of CPU step time" in summary_table([run])
        rows = summary_csv([run]).splitlines()
        column = rows[0].split(",").index("core_only")
        assert {row.split(",")[column] for row in rows[1:]} == {str(name == "sdpa")}
