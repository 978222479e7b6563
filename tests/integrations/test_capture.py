"""``runner.capture``, the profiler session every integration drives, on its own: the schedule's
arithmetic, what the metadata says of a model, the first batch read off the first attention block
(autocast's dtype included), one-line errors, and the order of start, steps and finish."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import ProfilerAction, ProfilerActivity

from runner.capture import Capture, ProfilerBusyError, Schedule, activities_for, describe_error, model_facts
from runner.torch_models import MHAStack
from tb_attn_plugin.vocab.names import METADATA_FILE


class SelfAttention(nn.Module):
    """q, k, v and output projections around one SDPA call: (B, S, D) in and out."""

    def __init__(self, d: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out_proj = nn.Linear(d, d)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        b, s, d = hidden_states.shape
        q, k, v = (t.view(b, s, self.heads, -1).transpose(1, 2) for t in self.qkv(hidden_states).chunk(3, -1))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out: torch.Tensor = self.out_proj(o.transpose(1, 2).reshape(b, s, d))
        return out


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(SelfAttention() for _ in range(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = x + layer(x)
        return x


def _train(model: nn.Module, capture: Capture, steps: int, x: torch.Tensor) -> None:
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    capture.start()
    for _ in range(steps):
        capture.begin_step()
        model(x).sum().backward()
        opt.step()
        opt.zero_grad()
    capture.finish()


def test_the_default_schedule_records_steps_4_to_8() -> None:
    s = Schedule()
    assert (s.first_recorded, s.steps) == (3, 8)
    # The profiler's steps as the integrations number them: step 0 runs before training.
    shifted = Schedule(skip_first=s.skip_first + 1).torch_schedule()
    actions = [shifted(i) for i in range(10)]
    recorded = [i for i, a in enumerate(actions) if a in (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)]
    assert recorded == [4, 5, 6, 7, 8]
    assert Schedule(repeat=0).steps is None and Schedule(skip_first=0, wait=2, warmup=0, active=1).first_recorded == 2


@pytest.mark.parametrize("bad", [dict(active=0), dict(wait=-1), dict(skip_first=1.5), dict(repeat=True)])
def test_a_bad_schedule_is_one_clear_error(bad: dict[str, object]) -> None:
    name = next(iter(bad))
    with pytest.raises(ValueError, match=f"^{name} must be an integer"):
        Schedule(**bad)  # type: ignore[arg-type]


def test_activities_follow_the_device() -> None:
    assert activities_for(torch.device("cpu")) == [ProfilerActivity.CPU]
    assert activities_for(torch.device("cuda", 0)) == [ProfilerActivity.CPU, ProfilerActivity.CUDA]


def test_errors_read_in_one_line() -> None:
    assert describe_error(None) is None
    assert describe_error(ValueError("bad\nmore")) == "ValueError: bad"
    assert describe_error(KeyboardInterrupt()) == "KeyboardInterrupt"
    assert describe_error(RuntimeError("[enforce fail] DefaultCPUAllocator: can't allocate memory")) == \
        "out of memory: [enforce fail] DefaultCPUAllocator: can't allocate memory"


def test_model_facts_read_a_hugging_face_config_wherever_it_sits() -> None:
    from devtools.training import tiny_llama

    llama = tiny_llama("eager")
    facts = model_facts(llama)
    assert facts["model"] == "LlamaForCausalLM" and facts["attn_implementation"] == "eager"
    assert facts["impl"] == "naive"  # the runner's word for eager attention
    assert facts["sizes"] == {"layers": 2, "heads": 4, "kv_heads": 2, "d_model": 128, "vocab": 1024, "dropout": 0.0}

    class Wrapper(nn.Module):  # a LightningModule holds the model the same way
        def __init__(self) -> None:
            super().__init__()
            self.model = llama

    wrapped = model_facts(Wrapper())
    assert wrapped["model"] == "LlamaForCausalLM" and wrapped["model_class"].endswith("Wrapper")
    assert model_facts(Tiny()) == {"model": "Tiny", "model_class": f"{__name__}.Tiny", "param_dtype": "float32"}


def test_a_capture_writes_scoped_whole_steps(tmp_path: Path) -> None:
    model = Tiny()
    capture = Capture(model, tmp_path, schedule=Schedule(skip_first=1, warmup=1, active=2))
    _train(model, capture, 4, torch.randn(3, 8, 16))
    meta = json.loads((tmp_path / METADATA_FILE).read_text())
    assert meta["status"] == "ok" and meta["steps"] == 4 and len(meta["traces"]) == 1
    assert (meta["config"]["batch"], meta["config"]["seq"]) == (3, 8)
    assert meta["blocks"] == [{"layer": 0, "module": "layers.0"}, {"layer": 1, "module": "layers.1"}]
    trace = json.loads((tmp_path / meta["traces"][0]).read_text())
    steps = sorted(e["name"] for e in trace["traceEvents"] if e.get("name", "").startswith("ProfilerStep#"))
    assert steps == ["ProfilerStep#3", "ProfilerStep#4"], "steps 3 and 4, the last one whole"
    assert any(e.get("name") == "tbattn.v1/L1/sdpa" for e in trace["traceEvents"])
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())
    capture.finish()  # once: a second finish does nothing


def test_autocast_gives_the_dtype_and_mha_its_sequence_axis(tmp_path: Path) -> None:
    model = Tiny()
    capture = Capture(model, tmp_path / "bf16", schedule=Schedule(skip_first=0, warmup=0, active=1))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _train(model, capture, 1, torch.randn(2, 5, 16))
    meta = json.loads((tmp_path / "bf16" / METADATA_FILE).read_text())
    assert meta["dtype"] == "bfloat16" and meta["param_dtype"] == "float32"

    from runner.config import ModelConfig

    mha = MHAStack(ModelConfig(layers=1, heads=2, d_model=16, seq=7, batch=3, vocab=32))
    capture = Capture(mha, tmp_path / "mha", schedule=Schedule(skip_first=0, warmup=0, active=1))
    capture.start()
    capture.begin_step()
    mha(torch.randint(32, (3, 7)))
    capture.finish()
    cfg = json.loads((tmp_path / "mha" / METADATA_FILE).read_text())["config"]
    assert (cfg["batch"], cfg["seq"]) == (3, 7)


def test_a_busy_profiler_is_refused_before_anything_changes(tmp_path: Path) -> None:
    model = Tiny()
    capture = Capture(model, tmp_path)
    with torch.profiler.profile(), pytest.raises(ProfilerBusyError, match="one at a time"):
        capture.start()
    assert not list(tmp_path.iterdir()) and not capture.running
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


def test_training_that_ends_before_recording_says_so(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    model = Tiny()
    with caplog.at_level(logging.WARNING, logger="runner.capture"):
        _train(model, Capture(model, tmp_path), 2, torch.randn(1, 4, 16))
    assert [r.getMessage() for r in caplog.records] == [
        "tb-attn: no trace was written: training ran 2 steps and the profiler records from step 4 "
        "(skip_first=2 + wait=0 + warmup=1); lower them or train longer"]
    assert json.loads((tmp_path / METADATA_FILE).read_text())["traces"] == []
