"""FLOPs and bytes of one ONNX operator, counted from its type, its attributes and its tensors' specs.

Conventions (each operator family's counter says what it counts):

* A FLOP is one arithmetic operation on one element; a multiply-add counts 2. Comparisons, selects
  and the adds of a reduction count 1 each.
* Bytes moved are what an unfused operator reads (activations and weights) and writes, every
  tensor once: the operator's memory traffic with no cache and no fusion. Operators that only
  reshape a tensor (Reshape, Squeeze, Flatten...) move none: onnxruntime aliases their output.
* Operators that only move, select or reinterpret data (Reshape, Transpose, Concat, Gather, Cast,
  Dropout at inference...) do 0 FLOPs.
* onnxruntime's fused operators (FusedConv, FusedGemm, Gelu, SkipLayerNormalization, NCHWc Conv...)
  count as the operators they replace.
* An operator not counted here (control flow, other custom operators, Resize, TopK...) or one whose
  needed shapes are unknown has unknown FLOPs, ``None``: never 0, so that a report can say how much time
  it cannot account for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import onnx

from ..core.graph import VIEW_OPS, TensorSpec
from .counters import (
    _REDUCTIONS_1,
    _REDUCTIONS_2,
    DATA_MOVEMENT_OPS,
    ELEMENTWISE_OPS,
    QUANTIZATION_OPS,
    VARIADIC_OPS,
    FlopCounter,
    _conv,
    _conv_transpose,
    _einsum,
    _elementwise,
    _gemm,
    _global_lp_pool,
    _global_pool,
    _layer_normalization,
    _lp_pool,
    _lrn,
    _matmul,
    _mean,
    _Op,
    _per_input_element,
    _pool,
    _quantization,
    _Unknown,
    _variadic,
    _zero,
)
from .fused_counters import (
    _GATES,
    FAST_GELU_FLOPS,
    GELU_FLOPS,
    MICROSOFT,
    NCHWC,
    _fused_attention,
    _fused_conv,
    _fused_gemm,
    _fused_matmul,
    _multi_head_attention,
    _onnx_attention,
    _per_output_element,
    _recurrent,
    _skip_layer_normalization,
)


@dataclass(frozen=True)
class Cost:
    """Work of one operator: FLOPs (None when not known) and bytes moved."""

    flops: int | None
    bytes: int


def operator_cost(
    op_type: str,
    domain: str,
    attributes: Mapping[str, Any],
    inputs: Sequence[TensorSpec | None],
    outputs: Sequence[TensorSpec | None],
) -> Cost:
    """The cost of one operator; ``None`` stands for an absent optional input or an unknown spec."""
    moved = 0 if op_type in VIEW_OPS and not _domain(domain) else sum(_nbytes(s) for s in [*inputs, *outputs] if s)
    counter = _COUNTERS.get((_domain(domain), op_type))
    flops = None
    if counter is not None:
        try:
            flops = counter(_Op(attributes, inputs, outputs))
        except _Unknown:
            flops = None
    return Cost(flops, moved)


#: Operators whose multiply-adds run on integers: processors run them several times faster than float ones.
INTEGER_OPS = frozenset({"MatMulInteger", "ConvInteger"})


def node_cost(node: onnx.NodeProto, specs: Mapping[str, TensorSpec]) -> Cost:
    """The cost of ``node``, with value specs looked up by name in ``specs``."""
    attributes = {attribute.name: onnx.helper.get_attribute_value(attribute) for attribute in node.attribute}
    return operator_cost(
        node.op_type,
        node.domain,
        attributes,
        [specs.get(name) if name else None for name in node.input],
        [specs.get(name) if name else None for name in node.output],
    )


def is_counted(op_type: str, domain: str = "") -> bool:
    """Whether this module knows how to count the operator's FLOPs."""
    return (_domain(domain), op_type) in _COUNTERS


def _domain(domain: str) -> str:
    return "" if domain == "ai.onnx" else domain


def _nbytes(spec: TensorSpec) -> int:
    try:
        return spec.nbytes
    except (KeyError, ValueError, TypeError):  # a dtype numpy has no size for
        return 0


# -- the table -----------------------------------------------------------------------------------

_COUNTERS: dict[tuple[str, str], FlopCounter] = {
    **{("", op): _zero for op in DATA_MOVEMENT_OPS},
    **{("", op): _elementwise for op in ELEMENTWISE_OPS},
    **{("", op): _variadic for op in VARIADIC_OPS - {"Mean"}},
    ("", "Mean"): _mean,
    **{("", op): _quantization for op in QUANTIZATION_OPS},
    ("", "MatMul"): _matmul,
    ("", "MatMulInteger"): _matmul,
    ("", "Gemm"): _gemm,
    ("", "Einsum"): _einsum,
    ("", "Conv"): _conv,
    ("", "ConvInteger"): _conv,
    ("", "ConvTranspose"): _conv_transpose,
    ("", "MaxPool"): _pool,
    ("", "AveragePool"): _pool,
    ("", "LpPool"): _lp_pool,
    ("", "GlobalMaxPool"): _global_pool,
    ("", "GlobalAveragePool"): _global_pool,
    ("", "GlobalLpPool"): _global_lp_pool,
    ("", "BatchNormalization"): _per_input_element(2),
    ("", "InstanceNormalization"): _per_input_element(7),
    ("", "GroupNormalization"): _per_input_element(7),
    ("", "LayerNormalization"): _layer_normalization,
    ("", "RMSNormalization"): _per_input_element(4),
    ("", "MeanVarianceNormalization"): _per_input_element(5),
    ("", "LRN"): _lrn,
    ("", "Softmax"): _per_input_element(5),
    ("", "LogSoftmax"): _per_input_element(5),
    ("", "Hardmax"): _per_input_element(1),
    ("", "CumSum"): _per_input_element(1),
    **{("", op): _per_input_element(1) for op in _REDUCTIONS_1},
    **{("", op): _per_input_element(2) for op in _REDUCTIONS_2},
    ("", "Attention"): _onnx_attention,
    ("com.microsoft", "MultiHeadAttention"): _multi_head_attention,
    ("com.microsoft", "Attention"): _fused_attention,
    **{("", op): _recurrent(op) for op in _GATES},
    ("", "Gelu"): _per_output_element(GELU_FLOPS),
    (MICROSOFT, "Gelu"): _per_output_element(GELU_FLOPS),
    (MICROSOFT, "BiasGelu"): _per_output_element(GELU_FLOPS + 1),
    (MICROSOFT, "FastGelu"): _per_output_element(FAST_GELU_FLOPS, bias=1),
    (MICROSOFT, "QuickGelu"): _per_output_element(3),
    (MICROSOFT, "BiasSoftmax"): _per_input_element(6),
    (MICROSOFT, "FusedConv"): _fused_conv,
    (MICROSOFT, "FusedGemm"): _fused_gemm,
    (MICROSOFT, "FusedMatMul"): _fused_matmul,
    (MICROSOFT, "SkipLayerNormalization"): _skip_layer_normalization(simplified=False),
    (MICROSOFT, "SkipSimplifiedLayerNormalization"): _skip_layer_normalization(simplified=True),
    (MICROSOFT, "SimplifiedLayerNormalization"): _per_input_element(4),
    (NCHWC, "Conv"): _fused_conv,
    (NCHWC, "MaxPool"): _pool,
    (NCHWC, "AveragePool"): _pool,
    (NCHWC, "GlobalMaxPool"): _global_pool,
    (NCHWC, "GlobalAveragePool"): _global_pool,
    (NCHWC, "ReorderInput"): _zero,
    (NCHWC, "ReorderOutput"): _zero,
}
