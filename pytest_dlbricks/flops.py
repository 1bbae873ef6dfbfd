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

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import onnx

from .graph import VIEW_OPS, TensorSpec


@dataclass(frozen=True)
class Cost:
    """Work of one operator: FLOPs (None when not known) and bytes moved."""

    flops: int | None
    bytes: int


@dataclass(frozen=True)
class _Op:
    """What a counter sees: attributes by name, and the specs of inputs and outputs by position."""

    attributes: Mapping[str, Any]
    inputs: Sequence[TensorSpec | None]
    outputs: Sequence[TensorSpec | None]

    def input(self, index: int) -> TensorSpec | None:
        return self.inputs[index] if index < len(self.inputs) else None

    def output(self, index: int) -> TensorSpec | None:
        return self.outputs[index] if index < len(self.outputs) else None

    def has_input(self, index: int) -> bool:
        return self.input(index) is not None


FlopCounter = Callable[[_Op], "int | None"]


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


class _Unknown(Exception):
    """A spec or attribute the count needs is missing."""


def _domain(domain: str) -> str:
    return "" if domain == "ai.onnx" else domain


def _nbytes(spec: TensorSpec) -> int:
    try:
        return spec.nbytes
    except (KeyError, ValueError, TypeError):  # a dtype numpy has no size for
        return 0


def _need(spec: TensorSpec | None) -> TensorSpec:
    if spec is None:
        raise _Unknown
    return spec


# -- data movement and elementwise ---------------------------------------------------------------

#: Operators that move, select or reinterpret data: no arithmetic.
DATA_MOVEMENT_OPS = frozenset(
    {
        "Cast", "CastLike", "Compress", "Concat", "Constant", "ConstantOfShape", "DepthToSpace", "Dropout",
        "Expand", "EyeLike", "Flatten", "Gather", "GatherElements", "GatherND", "Identity", "NonZero", "OneHot",
        "Pad", "Range", "Reshape", "ScatterElements", "ScatterND", "Shape", "Size", "Slice", "SpaceToDepth",
        "Split", "Squeeze", "Tile", "Transpose", "Trilu", "Unsqueeze",
    }
)  # fmt: skip
#: One FLOP per output element: activations, arithmetic, comparisons, logic, selection.
ELEMENTWISE_OPS = frozenset(
    {
        "Abs", "Acos", "Acosh", "Add", "And", "Asin", "Asinh", "Atan", "Atanh", "BitShift", "BitwiseAnd",
        "BitwiseNot", "BitwiseOr", "BitwiseXor", "Ceil", "Celu", "Clip", "Cos", "Cosh", "Div", "Elu", "Equal",
        "Erf", "Exp", "Floor", "Greater", "GreaterOrEqual", "HardSigmoid", "HardSwish", "IsInf",
        "IsNaN", "LeakyRelu", "Less", "LessOrEqual", "Log", "Mish", "Mod", "Mul", "Neg", "Not", "Or", "PRelu",
        "Pow", "Reciprocal", "Relu", "Round", "Selu", "Shrink", "Sigmoid", "Sign", "Sin", "Sinh", "Softplus",
        "Softsign", "Sqrt", "Sub", "Tan", "Tanh", "ThresholdedRelu", "Where", "Xor",
    }
)  # fmt: skip
#: Operators over any number of inputs: one FLOP per output element for each input after the first.
VARIADIC_OPS = frozenset({"Sum", "Max", "Min", "Mean"})
#: Quantisation: scale and zero point, two FLOPs per element.
QUANTIZATION_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"})


def _zero(op: _Op) -> int:
    return 0


def _elementwise(op: _Op) -> int:
    return _need(op.output(0)).numel


def _variadic(op: _Op) -> int:
    """``n - 1`` operations per output element for ``n`` inputs; Mean divides once more."""
    count = sum(spec is not None for spec in op.inputs)
    if len(op.inputs) != count:
        raise _Unknown
    per_element = count - 1
    return _need(op.output(0)).numel * per_element


def _mean(op: _Op) -> int:
    return _variadic(op) + (_need(op.output(0)).numel if len(op.inputs) > 1 else 0)


def _quantization(op: _Op) -> int:
    return 2 * _need(op.input(0)).numel


# -- matrix products -----------------------------------------------------------------------------


def _matmul(op: _Op) -> int:
    """``2 * K`` per output element, K the shared (last) axis of the first operand."""
    first = _need(op.input(0))
    if not first.shape:
        raise _Unknown
    return 2 * _need(op.output(0)).numel * first.shape[-1]


def _gemm(op: _Op) -> int:
    """``2 * M * N * K`` for the product, plus ``M * N`` for adding C when there is one."""
    a = _need(op.input(0))
    out = _need(op.output(0))
    if len(a.shape) != 2:
        raise _Unknown
    k = a.shape[0] if op.attributes.get("transA", 0) else a.shape[1]
    return 2 * out.numel * k + (out.numel if op.has_input(2) else 0)


def _einsum(op: _Op) -> int:
    """Per point of the index space: one multiply per operand after the first, one add if it sums.

    ``ij,jk->ik`` is ``2 * i * j * k``, as MatMul; a pure transpose is 0.
    """
    equation = _text(op.attributes.get("equation", "")).replace(" ", "")
    left, _, right = equation.partition("->")
    terms = left.split(",")
    if len(terms) != len(op.inputs):
        raise _Unknown
    sizes: dict[str, int] = {}
    for term, spec in zip(terms, op.inputs):
        shape = _need(spec).shape
        letters = _einsum_letters(term, len(shape))
        if len(letters) != len(shape):
            raise _Unknown
        for letter, size in zip(letters, shape):
            sizes[letter] = max(sizes.get(letter, 1), size)
    if "->" in equation:
        kept = set(_einsum_letters(right, len(_need(op.output(0)).shape)))
    else:  # implicit output: the letters used once, and the ellipsis
        used = [letter for term in terms for letter in _einsum_letters(term, 0)]
        kept = {letter for letter in sizes if used.count(letter) == 1 or letter.startswith(".")}
    summed = any(letter not in kept for letter in sizes)
    per_point = len(terms) - 1 + (1 if summed else 0)
    return per_point * math.prod(sizes.values())


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _einsum_letters(term: str, rank: int) -> list[str]:
    """A term's index names, with an ellipsis expanded to names aligned from the right (``.0`` last)."""
    if "..." not in term:
        return list(term)
    before, _, after = term.partition("...")
    hidden = max(rank - len(before) - len(after), 0)
    return [*before, *(f".{hidden - 1 - i}" for i in range(hidden)), *after]


# -- convolution and pooling ---------------------------------------------------------------------


def _conv(op: _Op) -> int:
    """``2 * C/group * prod(kernel)`` per output element, plus one per output element for the bias."""
    return 2 * _need(op.output(0)).numel * _per_filter(op) + _bias(op)


def _conv_transpose(op: _Op) -> int:
    """Each input element is multiplied into ``M/group * prod(kernel)`` outputs: 2 FLOPs each; plus the bias."""
    return 2 * _need(op.input(0)).numel * _per_filter(op) + _bias(op)


def _per_filter(op: _Op) -> int:
    """Elements of a convolution weight per slice of its first axis."""
    weight = _need(op.input(1))
    if not weight.shape or weight.shape[0] == 0:
        raise _Unknown
    return weight.numel // weight.shape[0]


def _bias(op: _Op) -> int:
    """One add per output element when the third input, a bias, is given."""
    return _need(op.output(0)).numel if op.has_input(2) else 0


def _pool(op: _Op) -> int:
    """One operation per output element and kernel position (compare, or add)."""
    kernel = op.attributes.get("kernel_shape")
    if not kernel:
        raise _Unknown
    return _need(op.output(0)).numel * math.prod(int(k) for k in kernel)


def _lp_pool(op: _Op) -> int:
    """Power and add per output element and kernel position."""
    return 2 * _pool(op)


def _global_pool(op: _Op) -> int:
    """One operation per input element."""
    return _need(op.input(0)).numel


def _global_lp_pool(op: _Op) -> int:
    return 2 * _global_pool(op)


# -- normalisation, softmax, reductions ----------------------------------------------------------


def _per_input_element(flops: int) -> FlopCounter:
    def count(op: _Op) -> int:
        return flops * _need(op.input(0)).numel

    count.__doc__ = f"{flops} per input element."
    return count


def _layer_normalization(op: _Op) -> int:
    """Mean, centre, square, variance sum, normalise, scale: 6 per element; 7 with a bias."""
    return (7 if op.has_input(2) else 6) * _need(op.input(0)).numel


def _lrn(op: _Op) -> int:
    """Square and add over the window of ``size`` channels, then scale, bias, power, divide."""
    size = int(op.attributes.get("size", 0))
    if size < 1:
        raise _Unknown
    return (2 * size + 4) * _need(op.input(0)).numel


_REDUCTIONS_1 = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceLogSum", "ArgMax", "ArgMin")
_REDUCTIONS_2 = ("ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSumExp")


# -- attention -----------------------------------------------------------------------------------


def _attention_core(batch_heads: int, q_len: int, kv_len: int, qk_dim: int, v_dim: int, *, masked: bool) -> int:
    """Scores ``Q K^T`` (2 per multiply-add), scale, mask add, softmax (5 per score), ``P V``."""
    scores = batch_heads * q_len * kv_len
    return 2 * scores * qk_dim + scores * (1 + (1 if masked else 0) + 5) + 2 * scores * v_dim


def _heads(op: _Op, name: str) -> int:
    heads = int(op.attributes.get(name, 0))
    if heads < 1:
        raise _Unknown
    return heads


def _onnx_attention(op: _Op) -> int:
    """ai.onnx Attention (opset 23): Q, K, V as ``[B, heads, S, D]`` or ``[B, S, heads * D]``."""
    q, k, v = (_need(op.input(i)) for i in range(3))
    if len(q.shape) == 4 and len(k.shape) == 4 and len(v.shape) == 4:
        batch, heads, q_len, qk_dim = q.shape
        kv_len, v_dim = k.shape[2], v.shape[3]
    elif len(q.shape) == 3 and len(k.shape) == 3 and len(v.shape) == 3:
        heads = _heads(op, "q_num_heads")
        kv_heads = _heads(op, "kv_num_heads")
        batch, q_len, hidden = q.shape
        qk_dim, kv_len, v_dim = hidden // heads, k.shape[1], v.shape[2] // kv_heads
    else:
        raise _Unknown
    past = op.input(4)
    if past is not None and len(past.shape) == 4:
        kv_len += past.shape[2]
    return _attention_core(batch * heads, q_len, kv_len, qk_dim, v_dim, masked=op.has_input(3))


def _multi_head_attention(op: _Op) -> int:
    """com.microsoft MultiHeadAttention with separate ``[B, S, hidden]`` query, key and value; the bias,
    when given, is added to all three."""
    q, k, v = (_need(op.input(i)) for i in range(3))
    if not (len(q.shape) == len(k.shape) == len(v.shape) == 3):
        raise _Unknown
    heads = _heads(op, "num_heads")
    batch, q_len, hidden = q.shape
    kv_len = k.shape[1]
    bias = batch * (q_len * hidden + kv_len * (k.shape[2] + v.shape[2])) if op.has_input(3) else 0
    masked = op.has_input(4) or op.has_input(5)
    return bias + _attention_core(batch * heads, q_len, kv_len, hidden // heads, v.shape[2] // heads, masked=masked)


def _fused_attention(op: _Op) -> int:
    """com.microsoft Attention: input ``[B, S, in]`` projected by weights ``[in, q + k + v hidden]``."""
    x, weight = _need(op.input(0)), _need(op.input(1))
    if len(x.shape) != 3 or len(weight.shape) != 2:
        raise _Unknown
    heads = _heads(op, "num_heads")
    batch, length, width = x.shape
    projected = weight.shape[1]
    sizes = op.attributes.get("qkv_hidden_sizes") or [projected // 3] * 3
    qk_hidden, v_hidden = int(sizes[0]), int(sizes[2])
    projection = 2 * batch * length * width * projected + (batch * length * projected if op.has_input(2) else 0)
    kv_len = length
    past = op.input(4)
    if past is not None and len(past.shape) == 5:
        kv_len += past.shape[3]
    core = _attention_core(batch * heads, length, kv_len, qk_hidden // heads, v_hidden // heads, masked=op.has_input(3))
    return projection + core


# -- recurrent -----------------------------------------------------------------------------------

_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
#: Per hidden unit and step: LSTM's ``c = f*c + i*g`` and ``h = o*tanh(c)``; GRU's reset and update.
_STATE_UPDATE = {"RNN": 0, "GRU": 5, "LSTM": 5}


def _recurrent(op_type: str) -> FlopCounter:
    gates = _GATES[op_type]

    def count(op: _Op) -> int:
        """Per step, batch row and direction: input and recurrent products (``2*g*H*(I+H)``), their sum,
        an activation per gate element, the biases when given, the state update, and LSTM peepholes."""
        x, weight = _need(op.input(0)), _need(op.input(1))
        if len(x.shape) != 3 or len(weight.shape) != 3:
            raise _Unknown
        directions, gate_rows, width = weight.shape
        hidden = gate_rows // gates
        steps, batch = (x.shape[1], x.shape[0]) if op.attributes.get("layout", 0) else (x.shape[0], x.shape[1])
        per_step = 2 * gates * hidden * (width + hidden) + 2 * gates * hidden + _STATE_UPDATE[op_type] * hidden
        if op.has_input(3):
            per_step += 2 * gates * hidden
        if op_type == "LSTM" and op.has_input(7):
            per_step += 6 * hidden
        return steps * batch * directions * per_step

    count.__doc__ = f"{op_type}: {gates} gate(s); " + (count.__doc__ or "")
    return count


# -- onnxruntime's own operators ----------------------------------------------------------------
# What onnxruntime's graph optimizations put in the graph it runs (the default cut): fused
# operators of the com.microsoft domain and the NCHWc layout operators of its CPU provider.
# Fused work is counted as the operators it replaces, so both cuts count a model alike, except
# the work the optimizations remove (a BatchNormalization folded into a Conv's weights).

#: Domain of onnxruntime's CPU layout-blocked (NCHWc) operators.
NCHWC = "com.microsoft.nchwc"
MICROSOFT = "com.microsoft"
#: Per element: x / sqrt(2), erf, + 1, * x, * 0.5, as the pattern onnxruntime fuses into Gelu.
GELU_FLOPS = 5
#: Per element, the tanh approximation: x^3 (2), * 0.044715, + x, * sqrt(2/pi), tanh, + 1, * x * 0.5 (2).
FAST_GELU_FLOPS = 9


def _fused_activation(op: _Op) -> int:
    """One FLOP per output element for an activation fused in with an ``activation`` attribute."""
    return _need(op.output(0)).numel if op.attributes.get("activation") else 0


def _fused_conv(op: _Op) -> int:
    """Conv, plus its fused activation, plus the fused residual add of a 4th input (``Z`` or ``Sum``)."""
    extra = _need(op.output(0)).numel if op.has_input(3) else 0
    return _conv(op) + _fused_activation(op) + extra


def _fused_gemm(op: _Op) -> int:
    return _gemm(op) + _fused_activation(op)


def _fused_matmul(op: _Op) -> int:
    """MatMul with transposes folded in, and its ``alpha`` scaling when not 1."""
    if op.attributes.get("transBatchA", 0) or op.attributes.get("transBatchB", 0):
        raise _Unknown
    first = _need(op.input(0))
    if len(first.shape) < 2:
        raise _Unknown
    shared = first.shape[-2] if op.attributes.get("transA", 0) else first.shape[-1]
    out = _need(op.output(0)).numel
    return 2 * out * shared + (out if float(op.attributes.get("alpha", 1.0)) != 1.0 else 0)


def _per_output_element(flops: int, *, bias: int | None = None) -> FlopCounter:
    """``flops`` per output element, one more when input ``bias`` is given."""

    def count(op: _Op) -> int:
        extra = 1 if bias is not None and op.has_input(bias) else 0
        return (flops + extra) * _need(op.output(0)).numel

    return count


def _skip_layer_normalization(simplified: bool) -> FlopCounter:
    """Add the skip input (and a bias when given), then normalize: 1 + 7 per element, 1 + 4 simplified."""

    def count(op: _Op) -> int:
        bias_index = 3 if simplified else 4
        per_element = 1 + (4 if simplified else 7) + (1 if op.has_input(bias_index) else 0)
        return per_element * _need(op.input(0)).numel

    return count


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
