"""The built tab that ships in the package is what the sources build to."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tb_attn_plugin.server.plugin import STATIC_DIR

FRONTEND = Path(__file__).resolve().parents[2] / "frontend"


def test_shipped_build_matches_a_fresh_build(tmp_path: Path) -> None:
    if shutil.which("node") is None:
        pytest.fail("node is missing: the frontend build needs Node.js 20 (make frontend-deps)")
    if not (FRONTEND / "node_modules" / ".package-lock.json").exists():
        pytest.fail("frontend/node_modules is missing: run `make frontend-deps` (npm ci)")
    proc = subprocess.run(["node", "build.mjs"], cwd=FRONTEND, env={**os.environ, "TB_ATTN_STATIC_OUT": str(tmp_path)},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    for name in ("index.js", "LICENSES.txt"):
        fresh = (tmp_path / name).read_bytes()
        shipped = (Path(STATIC_DIR) / name).read_bytes()
        assert fresh == shipped, f"tb_attn_plugin/static/{name} is stale: run `make frontend` and commit it"


def test_bundle_is_self_contained() -> None:
    js = (Path(STATIC_DIR) / "index.js").read_text(encoding="ascii")
    assert "export" in js and "render" in js
    for forbidden in ("http://", "https://", "//cdn", "sourceMappingURL", "/work/", "/home/"):
        assert forbidden not in js, forbidden
