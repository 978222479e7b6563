"""Attention statistics per head (runner/attn_stats.py) against a direct O(S²) computation, with
causal and non-causal attention, grouped-query heads, masks, and chunks that do not divide S."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from runner.attn_stats import head_stats, stat_names

WINDOWS = (4, 8, 64)
SINKS = (1, 4)
TOP_K = 5


def _direct(q: torch.Tensor, k: torch.Tensor, causal: bool, mask: torch.Tensor | None) -> dict[str, list[float]]:
    """Every statistic from the whole (S, S) probability matrix, query by query, in float64."""
    b, h, s, d = q.shape
    k = k.repeat_interleave(h // k.shape[1], dim=1)
    scores = (q.double() @ k.double().transpose(-1, -2)) / math.sqrt(d)
    allowed = torch.ones(b, h, s, s, dtype=torch.bool)
    if causal:
        allowed &= torch.ones(s, s, dtype=torch.bool).tril()
    if mask is not None:
        allowed &= mask
    p = torch.softmax(scores.masked_fill(~allowed, -math.inf), -1)
    out: dict[str, list[float]] = {}
    for head in range(h):
        acc: dict[str, list[float]] = {}
        for bi in range(b):
            for i in range(s):
                row = p[bi, head, i]
                n = int(allowed[bi, head, i].sum())
                if n > 1:
                    nz = row[row > 0]
                    acc.setdefault("entropy", []).append(float(-(nz * nz.log()).sum()) / math.log(n))
                for kk in SINKS:
                    acc.setdefault(f"sink_{kk}", []).append(float(row[:kk].sum()))
                for w in WINDOWS:
                    if w < s:
                        acc.setdefault(f"window_{w}", []).append(
                            float(sum(row[j] for j in range(s) if abs(i - j) < w)))
                acc.setdefault(f"top_{TOP_K}", []).append(float(row.sort(descending=True).values[:TOP_K].sum()))
                acc.setdefault("distance", []).append(float(sum(row[j] * abs(i - j) for j in range(s))))
        for name, values in acc.items():
            out.setdefault(name, []).append(sum(values) / len(values))
    return out


@pytest.mark.parametrize(("causal", "kv_heads", "chunk", "masked"), [
    (True, 4, 7, False), (False, 4, 7, False), (True, 2, 64, False), (False, 1, 5, True), (True, 4, 3, True)])
def test_statistics_equal_a_direct_computation(causal: bool, kv_heads: int, chunk: int, masked: bool) -> None:
    gen = torch.Generator().manual_seed(0)
    b, h, s, d = 2, 4, 23, 8
    q = torch.randn(b, h, s, d, generator=gen) * 2
    k = torch.randn(b, kv_heads, s, d, generator=gen) * 2
    mask = torch.rand(b, 1, s, s, generator=gen) > 0.3 if masked else None
    if mask is not None:
        mask[..., 0] = True  # every query keeps a key
    got = head_stats(q, k, causal=causal, mask=mask, chunk=chunk, windows=WINDOWS, sinks=SINKS, top_k=TOP_K).means()
    want = _direct(q, k, causal, mask.expand(b, h, s, s) if mask is not None else None)
    assert list(got) == stat_names(s, windows=WINDOWS, sinks=SINKS, top_k=TOP_K)  # window_64 >= S: left out
    for name in want:
        assert got[name] == pytest.approx(want[name], rel=1e-5, abs=1e-6), name


def built_qk(seq: int, d: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """q and k (1, 3, seq, d) of three built heads: 0 local (rotary-like features whose dot
    product peaks at |i - j| = 0 and falls off fast), 1 a sink (every query on token 0), 2
    uniform (q = 0). Attend with scale 1."""
    pos = torch.arange(seq, dtype=torch.float32)
    freqs = torch.linspace(0.05, 1.5, d // 2)
    feats = torch.cat([torch.cos(pos[:, None] * freqs), torch.sin(pos[:, None] * freqs)], -1) * 6
    sink_k = torch.zeros(seq, d)
    sink_k[0, 0] = 60.0
    sink_q = torch.zeros(seq, d)
    sink_q[:, 0] = 1.0
    zeros = torch.zeros(seq, d)
    return torch.stack([feats, sink_q, zeros])[None], torch.stack([feats, sink_k, zeros])[None]


def test_built_heads_are_told_apart() -> None:
    """Heads built to be local, a sink and uniform: their statistics say so."""
    s = 256
    q, k = built_qk(s)
    stats = head_stats(q, k, causal=True, scale=1.0, chunk=64).means()
    local, sink, uniform = 0, 1, 2
    assert stats["window_64"][local] > 0.99 and stats["sink_1"][local] < 0.05
    assert stats["sink_1"][sink] > 0.99 and stats["entropy"][sink] < 0.05
    assert stats["entropy"][uniform] == pytest.approx(1.0, abs=1e-6)
    assert stats["distance"][uniform] == pytest.approx(sum(i / 2 for i in range(s)) / s, rel=1e-6)
    # causal and uniform: query i spreads over i + 1 keys, of which min(i + 1, 64) are in the window
    assert stats["window_64"][uniform] == pytest.approx(sum(min(i + 1, 64) / (i + 1) for i in range(s)) / s)
    assert stats["window_64"][local] > stats["window_64"][uniform] + 0.3


def test_memory_stays_per_chunk() -> None:
    """Chunks bound the scores held at once: S = 2048 with chunk 128 never forms an (S, S) matrix
    (the largest tensor is B·H·128·S)."""
    sizes: list[int] = []
    real_softmax = torch.softmax

    def spy(x: torch.Tensor, dim: int) -> torch.Tensor:
        sizes.append(x.numel())
        return real_softmax(x, dim)

    q = torch.randn(1, 2, 2048, 8)
    torch.softmax = spy  # type: ignore[assignment]
    try:
        head_stats(q, q, causal=True, chunk=128)
    finally:
        torch.softmax = real_softmax  # type: ignore[assignment]
    assert sizes and max(sizes) == 2 * 128 * 2048


def test_event_files_round_trip_and_other_tags_are_ignored(tmp_path: Path) -> None:
    """Written with TensorBoard's writer, read back by the plugin's parser: the newest step of each
    statistic; another tool's event file in the same directory is read past and left unchanged."""
    from torch.utils.tensorboard import SummaryWriter

    from runner.attn_stats import write_events
    from tb_attn_plugin.engine.head_events import parse_head_stats

    other = SummaryWriter(log_dir=str(tmp_path))
    other.add_scalar("loss", 1.5, 0)
    other.add_scalar("attn_stats.entropy/not-a-head", 0.5, 0)
    other.close()
    (theirs,) = list(tmp_path.iterdir())
    before = theirs.read_bytes()
    write_events(str(tmp_path), {0: {"entropy": [0.25, 0.5], "window_64": [0.9, 0.1]}}, step=3)
    write_events(str(tmp_path), {0: {"entropy": [0.75, 1.0]}, 1: {"entropy": [0.125]}}, step=7)
    assert theirs.read_bytes() == before
    files = sorted(p.read_bytes() for p in tmp_path.iterdir())
    table, step = parse_head_stats(files)
    assert step == 7
    assert table == {0: {0: {"entropy": 0.75}, 1: {"entropy": 1.0}}, 1: {0: {"entropy": 0.125}}}
    # A file still being written gives the records it holds so far: the step-3 file (the longest: four
    # scalars and two histograms) cut inside its last scalar's record keeps the three before it.
    whole = max(files, key=len)
    cut = whole.index(b"attn_stats.window_64/L0.H1")
    assert parse_head_stats([whole[:cut]]) == ({0: {0: {"entropy": 0.25, "window_64": 0.9}, 1: {"entropy": 0.5}}}, 3)
    assert parse_head_stats([whole[:-3]]) == ({0: {0: {"entropy": 0.25, "window_64": 0.9},
                                                   1: {"entropy": 0.5, "window_64": 0.1}}}, 3)
    assert parse_head_stats([b"not an event file at all"]) == ({}, None)


class SyntheticAttention(torch.nn.Module):
    """One attention block whose heads are built: head 0 local (q·k peaks on the diagonal), head 1
    a sink (every query on token 0), head 2 uniform (q = 0). It calls SDPA as models do."""

    def __init__(self, seq: int) -> None:
        super().__init__()
        q, k = built_qk(seq)
        self.register_buffer("q", q)
        self.register_buffer("k", k)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        v = x[:, None].expand(-1, 3, -1, -1)
        return torch.nn.functional.scaled_dot_product_attention(self.q, self.k, v, is_causal=True, scale=1.0)


class SyntheticModel(torch.nn.Module):
    def __init__(self, seq: int) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList([SyntheticAttention(seq), SyntheticAttention(seq)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = b(x).mean(1)
        return x


def test_a_model_of_built_heads_is_classified() -> None:
    """Local, sink and uniform heads, captured at the model's own SDPA calls (runner.attn_stats.
    capture) and judged by the analysis (analysis.heads.attn_stats)."""
    from runner.attn_stats import capture
    from tb_attn_plugin.analysis.measures.heads import attn_stats

    seq = 512
    model = SyntheticModel(seq)
    with torch.no_grad(), capture(model) as found:
        model(torch.randn(1, seq, 16))
    assert sorted(found) == [0, 1]
    table = {layer: {h: {k: v[h] for k, v in s.means().items()} for h in range(3)} for layer, s in found.items()}
    stats = attn_stats(table, 0, weights="checkpoint", files=["x"])
    assert stats is not None and stats.window == 256
    flags = {(h.layer, h.head): (h.local, h.sink) for h in stats.heads}
    for layer in (0, 1):
        assert flags[(layer, 0)] == (True, False)  # local
        assert flags[(layer, 1)] == (False, True)  # a sink (its mass is on token 0, not in the window)
        assert flags[(layer, 2)] == (False, False)  # uniform
    assert torch.nn.functional.scaled_dot_product_attention.__name__ == "scaled_dot_product_attention"  # restored


def test_instrument_records_a_hugging_face_models_statistics(tmp_path: Path) -> None:
    """runner.instrument(model, attn_stats=True): an eager GPT-2 (its SDPA path while recording,
    then eager again), the statistics written as an event file the plugin's parser reads back."""
    transformers = pytest.importorskip("transformers")
    from runner import instrument
    from tb_attn_plugin.engine.head_events import parse_head_stats

    cfg = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=64, n_positions=128,
                                  attn_implementation="eager")
    model = transformers.GPT2LMHeadModel(cfg).eval()
    ids = torch.randint(64, (2, 96), generator=torch.Generator().manual_seed(0))
    with instrument(model, attn_stats=True) as inst:
        layers = inst.record_attn_stats(lambda: model(input_ids=ids), log_dir=str(tmp_path), step=5)
    assert model.config._attn_implementation == "eager"
    assert sorted(layers) == [0, 1] and all(len(v) == 4 for s in layers.values() for v in s.values())
    table, step = parse_head_stats([p.read_bytes() for p in tmp_path.iterdir()])
    assert step == 5 and table[1][3]["entropy"] == pytest.approx(layers[1]["entropy"][3], rel=1e-6)
    with instrument(model) as plain, pytest.raises(ValueError, match="attn_stats=True"):
        plain.record_attn_stats(lambda: None, log_dir=str(tmp_path))


def test_hostile_event_records_are_bounded(tmp_path: Path) -> None:
    """Tags with names or numbers of their own, non-finite values and a lying length are skipped."""
    from torch.utils.tensorboard import SummaryWriter

    from tb_attn_plugin.engine.head_events import parse_head_stats

    w = SummaryWriter(log_dir=str(tmp_path))
    w.add_scalar("attn_stats.entropy/L0.H0", 0.5, 1)
    w.add_scalar("attn_stats.made_up_stat/L0.H0", 0.5, 1)
    w.add_scalar("attn_stats.entropy/L99999.H0", 0.5, 1)
    w.add_scalar("attn_stats.entropy/L1.H1", float("nan"), 1)
    w.close()
    (f,) = list(tmp_path.iterdir())
    data = f.read_bytes()
    table, step = parse_head_stats([data, b"\xff" * 8 + b"\x00" * 20])
    assert (table, step) == ({0: {0: {"entropy": 0.5}}}, 1)
