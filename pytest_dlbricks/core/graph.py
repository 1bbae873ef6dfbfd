"""The vocabulary every stage shares: tensor specs, the model graph the cutter reads, size limits.

It imports nothing of the plugin's own, so that loading, cutting, synthesis, running and
composition can all build on it without importing each other.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

#: Integer and boolean tensors up to this many elements keep their real value (shapes, indices, masks).
MAX_KEPT_INTEGER_ELEMENTS = 1 << 20
#: Lowest IR version that lets initializers stand apart from graph inputs (and be pre-packed).
MIN_IR_VERSION = 4
#: Operators that only give a tensor another shape: onnxruntime aliases their output, they move no bytes.
VIEW_OPS = frozenset({"Dropout", "Flatten", "Identity", "Reshape", "Squeeze", "Unsqueeze"})
#: Operators whose work or output size depends on the values of their inputs, not only on their shapes.
DATA_DEPENDENT_OPS = frozenset({"If", "Loop", "NonZero", "TopK", "NonMaxSuppression", "Unique", "Compress"})
#: Inputs, by position, whose values set another tensor's shape or size whatever their type: Resize's
#: roi, scales and sizes, Upsample's scales, Range's bounds (float tensors that are no weights).
STEERING_SLOTS = {"Resize": (1, 2, 3), "Upsample": (1,), "Range": (0, 1, 2)}
#: Share of the machine's physical memory a single tensor may need.
MEMORY_SHARE = 0.5
#: Limit used where the physical memory cannot be read.
FALLBACK_MEMORY_LIMIT = 4 << 30

FLOAT_TYPES = frozenset(
    {
        onnx.TensorProto.FLOAT,
        onnx.TensorProto.DOUBLE,
        onnx.TensorProto.FLOAT16,
        onnx.TensorProto.BFLOAT16,
    }
)
#: Integer types of quantized weights and activations. Shapes, indices and axes are 32 or 64 bits, masks
#: and conditions booleans: such a tensor of two or more dimensions is data, whose values move no work
#: (zero points and other per-channel parameters are scalars and vectors).
QUANTIZED_TYPES = frozenset({onnx.TensorProto.INT8, onnx.TensorProto.UINT8})
#: Operators multiplying quantized tensors into 32-bit sums, and those that carry such a sum on (see
#: :func:`quantized_accumulators`).
INTEGER_PRODUCT_OPS = frozenset({"MatMulInteger", "ConvInteger"})
SUM_CARRYING_OPS = frozenset({"Add", "Sub", "Mul"})
#: Inputs, by position, that are the 32-bit bias a quantized operator adds to its sums.
QUANTIZED_BIAS_SLOTS = {"QLinearConv": 8}


def is_quantized_data(dtype: int, shape: tuple[int, ...]) -> bool:
    """Whether a tensor of this ONNX element type and shape holds quantized weights or activations."""
    return dtype in QUANTIZED_TYPES and len(shape) >= 2


@dataclass(frozen=True)
class TensorSpec:
    """Element type (an ``onnx.TensorProto`` data type) and concrete shape of a tensor."""

    dtype: int
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * onnx.helper.tensor_dtype_to_np_dtype(self.dtype).itemsize

    @property
    def is_float(self) -> bool:
        return self.dtype in FLOAT_TYPES

    def steers(self, *, constant: bool) -> bool:
        """Whether a tensor of this spec likely steers computation, so synthetic values would change the work.

        Integer and boolean tensors do (shapes, indices, masks, conditions); so do constant float scalars
        (epsilons, exponents). Other float tensors are weights or activations, and so are quantized ones
        (see :func:`is_quantized_data`): only their shape matters. Keeping them would also hand a model's
        real quantized weights to every brick suite exported from it.
        """
        if self.is_float:
            return constant and self.numel <= 1
        if is_quantized_data(self.dtype, self.shape):
            return False
        return self.numel <= MAX_KEPT_INTEGER_ELEMENTS

    def describe(self) -> str:
        try:
            dtype = onnx.TensorProto.DataType.Name(self.dtype).lower()
        except ValueError:
            dtype = f"type{self.dtype}"
        return f"{dtype}[{','.join(map(str, self.shape))}]"


@dataclass
class ModelGraph:
    """What the cutter and the brick builder need of one model, without its weight values."""

    path: Path
    opset_imports: dict[str, int]
    ir_version: int
    functions: list[onnx.FunctionProto]
    #: Compute nodes (layers) in topological order.
    layers: list[onnx.NodeProto]
    #: Every value a layer reads or writes, by name.
    specs: dict[str, TensorSpec]
    #: Names of values that are weights: computable without the model's inputs.
    weights: frozenset[str]
    #: Real values of tensors that steer computation (see :meth:`TensorSpec.steers`, :data:`STEERING_SLOTS`).
    kept_values: dict[str, np.ndarray]
    inputs: list[str]
    outputs: list[str]
    #: Symbolic dimensions that were not given and took :data:`DEFAULT_DIM`.
    guessed_dims: dict[str, int] = field(default_factory=dict)
    #: Sizes the sample inputs gave symbolic dimensions: they win over the sizes given (see :mod:`.samples`).
    sampled_dims: dict[str, int] = field(default_factory=dict)
    #: Names the model's symbolic input dimensions answer to: their own, and each input axis's (``x[2]``).
    dim_names: tuple[str, ...] = ()
    #: Whether onnxruntime is given the sizes only by the inputs' values, as the file declares them: it
    #: refuses the model with concrete input sizes (a branch not taken fails its shape inference), or runs
    #: more nodes without them (what the file computes from its sizes). Its bricks declare none either.
    unsized: bool = False
    #: Model outputs that are not tensors (ZipMap's sequences of maps), with their types: a brick may
    #: return them, never take them in.
    non_tensor_outputs: dict[str, onnx.TypeProto] = field(default_factory=dict)
    #: Kept values that are activations, kept only because an operator near them works on their data.
    activations: frozenset[str] = frozenset()
    #: The :data:`DATA_DEPENDENT_OPS` among the layers (and inside their subgraphs).
    data_dependent: tuple[str, ...] = ()
    #: Weights the model also lists as graph inputs, from IR 4 on: onnxruntime takes them as inputs a caller
    #: may override, neither folds nor pre-packs them, and optimizes around them (a Conv reading one runs
    #: without NCHWc, about twice as slow); the bricks reading them list them so too.
    weights_as_inputs: frozenset[str] = frozenset()
    #: Per layer, the values it reads, including the outer-scope names its subgraphs read.
    layer_reads: list[list[str]] = field(init=False, repr=False)
    #: Per value, the indices of the layers that read it.
    readers: dict[str, list[int]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.layer_reads = [node_inputs(layer) for layer in self.layers]
        self.readers = {}
        for index, reads in enumerate(self.layer_reads):
            for name in reads:
                self.readers.setdefault(name, []).append(index)


def node_inputs(node: onnx.NodeProto) -> list[str]:
    """Non-empty input names of a node, then the outer-scope names read inside its subgraphs."""
    names = [name for name in node.input if name]
    for name in subgraph_outer_names(node):
        if name not in names:
            names.append(name)
    return names


def subgraph_outer_names(node: onnx.NodeProto) -> list[str]:
    """Names the node's subgraphs (If, Loop, Scan bodies) read from the enclosing scope."""
    outer: list[str] = []
    for body in subgraphs(node):
        defined = {v.name for v in body.input} | {t.name for t in body.initializer}
        for inner in body.node:
            for name in node_inputs(inner):
                if name not in defined and name not in outer:
                    outer.append(name)
            defined.update(inner.output)
    return outer


def nested_tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    """Tensors stored inside the graph's nodes rather than as its initializers: attribute values (such
    as Constant's) and everything stored in subgraphs (If, Loop, Scan bodies), at any depth."""
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.TENSOR:
                yield attribute.t
            yield from attribute.tensors
        for body in subgraphs(node):
            yield from body.initializer
            yield from nested_tensors(body)


def subgraphs(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    """The node's If, Loop and Scan bodies."""
    for attribute in node.attribute:
        if attribute.type == onnx.AttributeProto.GRAPH:
            yield attribute.g
        elif attribute.type == onnx.AttributeProto.GRAPHS:
            yield from attribute.graphs


def steering_slot_values(layers: Iterable[onnx.NodeProto]) -> set[str]:
    """Names the layers read at a :data:`STEERING_SLOTS` position: their values decide shapes."""
    return {
        layer.input[slot]
        for layer in layers
        if not layer.domain
        for slot in STEERING_SLOTS.get(layer.op_type, ())
        if slot < len(layer.input) and layer.input[slot]
    }


def quantized_accumulators(layers: Iterable[onnx.NodeProto]) -> set[str]:
    """Names of the 32-bit sums the layers' integer products write (MatMulInteger, ConvInteger), of what adding
    to or scaling such a sum writes, in order, and of what is added to it or scales it (a bias, QLinearConv's
    too): quantized data derived from the weights, whose values move no work either (see
    :func:`is_quantized_data`)."""
    sums: set[str] = set()
    for layer in layers:
        if layer.domain:
            continue
        if layer.op_type in INTEGER_PRODUCT_OPS:
            sums.update(layer.output)
        elif layer.op_type in SUM_CARRYING_OPS and sums.intersection(layer.input):
            sums.update([*layer.input, *layer.output])
        slot = QUANTIZED_BIAS_SLOTS.get(layer.op_type)
        if slot is not None and slot < len(layer.input) and layer.input[slot]:
            sums.add(layer.input[slot])
    return sums


def data_dependent_ops(node: onnx.NodeProto) -> set[str]:
    """The :data:`DATA_DEPENDENT_OPS` a node is or holds in its subgraphs."""
    found = {node.op_type} & DATA_DEPENDENT_OPS if not node.domain else set()
    for body in subgraphs(node):
        for inner in body.node:
            found |= data_dependent_ops(inner)
    return found


def is_tensor_type(dtype: int) -> bool:
    """Whether ``dtype`` is an ONNX tensor element type (a file may hold any number there)."""
    try:
        onnx.helper.tensor_dtype_to_np_dtype(dtype)
    except KeyError:
        return False
    return True


def memory_limit() -> int:
    """Bytes one tensor may need: half of the physical memory, so a model cannot push the machine into swap."""
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return FALLBACK_MEMORY_LIMIT
    return int(physical * MEMORY_SHARE) if physical > 0 else FALLBACK_MEMORY_LIMIT


def format_bytes(count: int) -> str:
    """A byte count in binary units, such as ``4.0 EiB``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if count < 1024:
            return f"{count} B" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024  # type: ignore[assignment]
    return f"{count:.1f} EiB"
