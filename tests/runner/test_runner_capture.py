"""``runner.capture``'s parts: the schedule's arithmetic, what the profiler records on a device,
what a model says of itself, errors in one line, and one profiler at a time. The whole capture
driven by training loops is tested in ``tests/integrations/test_capture.py``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile
from transformers import GPT2Config, GPT2LMHeadModel

from runner.capture import (
    Capture,
    ProfilerBusyError,
    Schedule,
    activities_for,
    describe_error,
    model_device,
    model_facts,
)


def test_the_schedule_counts_its_steps() -> None:
    s = Schedule(skip_first=2, wait=1, warmup=1, active=3, repeat=2)
    assert (s.first_recorded, s.steps) == (4, 2 + (1 + 1 + 3) * 2)
    assert Schedule().first_recorded == 3 and Schedule().steps == 8  # steps 4 to 8 recorded
    assert Schedule(repeat=0).steps is None  # until training ends
    for bad, message in [({"active": 0}, "active must be an integer >= 1"), ({"wait": -1}, "wait must be"),
                         ({"warmup": True}, "warmup must be")]:
        with pytest.raises(ValueError, match=message):
            Schedule(**bad)  # type: ignore[arg-type]


def test_activities_per_device() -> None:
    assert activities_for(torch.device("cpu")) == [ProfilerActivity.CPU]
    assert activities_for(torch.device("cuda")) == [ProfilerActivity.CPU, ProfilerActivity.CUDA]


def test_a_hugging_face_model_says_its_class_sizes_and_attention() -> None:
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=8, vocab_size=16, n_positions=8,
                                       attn_implementation="eager"))
    facts = model_facts(model)
    assert facts["model"] == "GPT2LMHeadModel" and facts["model_class"].endswith(".GPT2LMHeadModel")
    assert (facts["attn_implementation"], facts["impl"], facts["param_dtype"]) == ("eager", "naive", "float32")
    assert facts["sizes"]["layers"] == 1 and facts["sizes"]["heads"] == 2
    plain = model_facts(nn.Linear(2, 2).to(torch.float64))
    assert plain == {"model": "Linear", "model_class": "torch.nn.modules.linear.Linear", "param_dtype": "float64"}
    assert model_device(nn.ReLU()) == torch.device("cpu")  # no parameters: the CPU


def test_errors_in_one_line() -> None:
    assert describe_error(None) is None
    assert describe_error(ValueError("bad shape\nat line 3")) == "ValueError: bad shape"
    assert describe_error(KeyError()) == "KeyError"
    assert describe_error(RuntimeError("DefaultCPUAllocator: can't allocate memory")) == (
        "out of memory: DefaultCPUAllocator: can't allocate memory")


def test_another_profiler_recording_leaves_everything_as_it_was(tmp_path: Path) -> None:
    model = nn.Linear(2, 2)
    capture = Capture(model, tmp_path / "run")
    with profile(activities=[ProfilerActivity.CPU]), pytest.raises(ProfilerBusyError, match="already recording"):
        capture.start()
    assert not capture.running and capture.record is None and not (tmp_path / "run").exists()
