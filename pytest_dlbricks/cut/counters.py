"""FLOP counters of the standard ONNX operators, one per operator family, each seeing the operator as an ``_Op``: its
attributes and its tensors' specs."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.graph import TensorSpec


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


class _Unknown(Exception):
    """A spec or attribute the count needs is missing."""


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
