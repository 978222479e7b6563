"""A trace's attribution as rows, one per event and per memory event: what the analysis tests'
golden files hold (``tests/analysis/conftest.py``'s ``golden``) and what their checks pick from."""

from __future__ import annotations

from typing import Any

from tb_attn_plugin.analysis.attribution.attribute import Attribution
from tb_attn_plugin.trace.events import Events
from tb_attn_plugin.vocab.scopes import PHASES

Rows = dict[str, Any]


def _absent(value: int) -> int | None:
    return None if value < 0 else int(value)


def attribution_rows(events: Events, att: Attribution) -> Rows:
    """One row per complete event and per memory event, in an order that does not depend on the file."""
    rows: list[dict[str, Any]] = []
    for i in range(len(events)):
        track = events.tracks[int(events.track[i])]
        phase = int(att.phase[i])
        rows.append({
            "name": events.names[int(events.name[i])],
            "track": f"{track.pid}/{track.tid}",
            "ts": float(events.ts[i]),
            "dur": float(events.dur[i]),
            "layer": _absent(att.layer[i]),
            "head": _absent(att.head[i]),
            "phase": PHASES[phase] if phase >= 0 else None,
            "step": _absent(att.step[i]),
            "backward": bool(att.backward[i]),
            "scope": bool(att.is_scope[i]),
            "flops": float(att.flops[i]),
        })
    rows.sort(key=lambda r: (r["track"], r["ts"], -r["dur"], r["name"]))
    memory: list[dict[str, Any]] = []
    for k in range(len(events.mem_ts)):
        track = events.tracks[int(events.mem_track[k])]
        phase = int(att.mem_phase[k])
        memory.append({
            "track": f"{track.pid}/{track.tid}",
            "ts": float(events.mem_ts[k]),
            "bytes": int(events.mem_bytes[k]),
            "total": int(events.mem_total[k]),
            "device": [int(events.mem_device_type[k]), int(events.mem_device_id[k])],
            "layer": _absent(att.mem_layer[k]),
            "head": _absent(att.mem_head[k]),
            "phase": PHASES[phase] if phase >= 0 else None,
            "step": _absent(att.mem_step[k]),
            "backward": bool(att.mem_backward[k]),
        })
    memory.sort(key=lambda r: (r["track"], r["ts"], r["bytes"]))
    return {"events": rows, "memory": memory, "modules": {str(k): v for k, v in sorted(att.modules.items())}}
