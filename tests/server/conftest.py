"""Fixtures of the plugin tests: a parse that waits for the test to let it go."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tb_attn_plugin.engine import loader as loader_module


@pytest.fixture
def gated(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[threading.Event, Counter[str]]]:
    """Parsing a trace of the run named "naive" waits for the event; every parse is counted."""
    gate = threading.Event()
    calls: Counter[str] = Counter()
    real = loader_module.load_events

    def load_events(path: str, **kwargs: object) -> object:
        run = Path(path).parent.name
        calls[run] += 1
        if run == "naive":
            assert gate.wait(60), "the test never opened the gate"
        return real(path, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(loader_module, "load_events", load_events)
    yield gate, calls
    gate.set()
