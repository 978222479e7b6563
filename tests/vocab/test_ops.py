"""One home for op names: ``tb_attn_plugin/vocab/ops.py`` spells every ATen op that tb-attn recognises."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tb_attn_plugin.analysis.backend import detect_backend
from tb_attn_plugin.vocab import ops

PACKAGE = Path(ops.__file__).parent.parent
_OP_NAME = re.compile(r"^aten::\w+$")


def _op_literals(path: Path) -> list[str]:
    """String constants in ``path`` that are exactly an op name (sentences mentioning one are not)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and _OP_NAME.match(node.value)]


def test_no_other_module_spells_an_op_name() -> None:
    modules = [p for p in sorted(PACKAGE.rglob("*.py")) if p != PACKAGE / "vocab" / "ops.py"]
    assert len(modules) > 30
    spelled = {str(p.relative_to(PACKAGE)): names for p in modules if (names := _op_literals(p))}
    assert spelled == {}


def test_the_decoder_keeps_the_shapes_the_analysis_reads() -> None:
    read = (ops.SDPA_OPS | set(ops.SDPA_FORWARD) | set(ops.SDPA_BACKWARD) | set(ops.MATMUL_ARGS) | {ops.LINEAR_OP}
            | set(ops.INT_MATMUL_ARGS)
            | ops.COPY_OPS | ops.DTYPE_CONVERT_OPS | {ops.FLASH_FORWARD_OP, ops.EFFICIENT_FORWARD_OP}
            | ops.SOFTMAX_OPS | ops.MASKED_FILL_OPS | ops.KERNEL_BACKWARD_OPS | ops.FUSED_BLOCK_OPS
            | ops.KV_EXPAND_OPS  # the KV cache's K and V before grouped-query expansion (analysis/generation.py)
            | ops.ELEMENTWISE_OPS | ops.NORM_OPS | {ops.NATIVE_DROPOUT_OP}  # bytes moved (analysis/traffic.py)
            | {ops.EMBEDDING_OP}  # a relative position bias's (Sq, Sk) bucket index (analysis/op_findings.py)
            | ops.LIBRARY_SHAPE_OPS  # attention libraries' cores: their FLOPs (analysis/flops.py library_flops)
            | ops.SERVING_SHAPE_OPS)  # serving cores' q and KV writes' cache (analysis/batch.py)
    assert read == ops.SHAPE_OPS
    # Element-wise ops whose bytes the roofline needs are kept (their cost: bench/README.md, "Bytes
    # model"); other frequent ops stay out: allocations, activations, reductions.
    assert not {"aten::empty", "aten::gelu", "aten::sum", "aten::view", "aten::cat"} & ops.SHAPE_OPS


def test_sets_that_look_alike_differ_only_where_documented() -> None:
    assert ops.COPY_OPS < ops.MATMUL_INPUT_COPY_OPS
    assert ops.MATMUL_OPS == ops.MATMUL_WRAPPER_OPS | ops.GEMM_OPS - {"aten::addmm"}
    assert set(ops.SDPA_FORWARD) == ops.SDPA_OPS - {ops.SDPA_OP, ops.SDPA_MATH_OP}
    assert ops.SAFE_SOFTMAX_OP in ops.SOFTMAX_OPS and ops.INPLACE_COPY_OP in ops.COPY_OPS
    assert set(ops.__all__) == {n for n in vars(ops) if n.isupper()}


def test_backend_and_inference_share_one_softmax_set() -> None:
    # Inference counted torch.special.softmax as attention's softmax; the backend did not.
    backend, evidence = detect_backend(["aten::special_softmax", "aten::bmm"], [])
    assert (backend, evidence) == ("naive", ["aten::bmm", "aten::special_softmax"])
