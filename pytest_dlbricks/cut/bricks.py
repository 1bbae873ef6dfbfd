"""A brick: a run of consecutive layers described without names or weight values, and its signature.

Two bricks are the same when they do the same work: same operators, attributes, wiring, and shapes
and dtypes of inputs, outputs and weights. The description renames every value canonically, so the
same layers in two models give the same description, the same signature and the same runnable model,
and nothing of the source model's names or weights leaks into a brick suite.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from ..core.graph import ModelGraph, TensorSpec, format_bytes, is_quantized_data, memory_limit

#: Operator names shown in a brick's label before the rest is summarised.
LABEL_OPS = 4
#: Value of every element of a weight inside a subgraph body (If, Loop, Scan) in a brick.
BODY_WEIGHT = 0.05


@dataclass(frozen=True)
class BrickSpec:
    """A runnable description of one brick, canonically named; built by :func:`describe_brick`."""

    nodes: tuple[onnx.NodeProto, ...]
    #: Activations fed at run time: (canonical name, spec).
    inputs: tuple[tuple[str, TensorSpec], ...]
    #: Weights, stored as initializers: (canonical name, spec).
    weights: tuple[tuple[str, TensorSpec], ...]
    outputs: tuple[tuple[str, TensorSpec], ...]
    #: Real values kept for inputs and weights that steer computation, by canonical name.
    values: Mapping[str, np.ndarray]
    opset_imports: dict[str, int]
    ir_version: int
    functions: tuple[onnx.FunctionProto, ...]
    signature: str
    #: Outputs that are model outputs but no tensors (ZipMap's sequences of maps): (canonical name,
    #: serialized ``onnx.TypeProto``). Nothing is ever fed from them, so they need no synthesis.
    non_tensor_outputs: tuple[tuple[str, bytes], ...] = ()
    #: Kept values that are activations (read by an operator whose work depends on their data), not
    #: steering values: a suite withholds them unless told otherwise; the signature counts their presence.
    activations: frozenset[str] = frozenset()
    #: Whether the brick's model declares its inputs and outputs by type only, as its model is given to
    #: onnxruntime (see :attr:`.ModelGraph.unsized`); they are the specs' sizes all the same.
    unsized: bool = False
    #: Weights the brick's model also lists as graph inputs, as the model does (see
    #: :attr:`.ModelGraph.weights_as_inputs`): onnxruntime then runs them as it runs them in the model.
    weights_as_inputs: frozenset[str] = frozenset()

    @property
    def ops(self) -> tuple[str, ...]:
        return tuple(node.op_type for node in self.nodes)

    @property
    def output_count(self) -> int:
        """All outputs, tensors or not: a call's cost grows with each."""
        return len(self.outputs) + len(self.non_tensor_outputs)

    @property
    def short_signature(self) -> str:
        return self.signature[:8]

    @property
    def label(self) -> str:
        """Readable, stable name such as ``Conv+Relu-3f2a91c0`` used in item ids."""
        ops = list(self.ops)
        if len(ops) > LABEL_OPS:
            ops = [*ops[: LABEL_OPS - 1], f"{len(ops) - LABEL_OPS + 1}more"]
        return f"{'+'.join(ops)}-{self.short_signature}"


class UnbuildableBrick(Exception):
    """The layers cannot form a standalone model (for example a boundary value that is not a tensor)."""


def describe_brick(graph: ModelGraph, begin: int, end: int) -> BrickSpec:
    """Describe layers ``[begin, end)`` of ``graph`` as a standalone brick.

    Raises :class:`UnbuildableBrick` when a value crossing the brick's boundary has no tensor spec (but
    for a model output that is no tensor, which the brick returns as it is), or when its inputs, weights
    and outputs together need more than :func:`memory_limit` bytes (running it allocates them all at
    once; a tensor alone is checked when the model is loaded).
    """
    layers = graph.layers[begin:end]
    produced = {name for layer in layers for name in layer.output if name}
    read_after = _read_outside(graph, begin, end)
    renames: dict[str, str] = {}
    inputs: list[tuple[str, TensorSpec]] = []
    weights: list[tuple[str, TensorSpec]] = []
    values: dict[str, np.ndarray] = {}
    activations: set[str] = set()
    weights_as_inputs: set[str] = set()

    def boundary_spec(name: str) -> TensorSpec:
        spec = graph.specs.get(name)
        if spec is None:
            raise UnbuildableBrick(f"value {name!r} crosses the brick boundary but is not a tensor of known shape")
        return spec

    for offset, layer in enumerate(layers):
        for name in graph.layer_reads[begin + offset]:
            if name in renames or name in produced:
                continue
            spec = boundary_spec(name)
            group = weights if name in graph.weights else inputs
            renames[name] = f"{'weight' if group is weights else 'input'}_{len(group)}"
            group.append((renames[name], spec))
            if name in graph.kept_values:
                values[renames[name]] = graph.kept_values[name]
            if name in graph.activations:
                activations.add(renames[name])
            if name in graph.weights_as_inputs:
                weights_as_inputs.add(renames[name])
        for name in layer.output:
            if name:
                renames[name] = f"value_{sum(1 for v in renames.values() if v.startswith('value_'))}"
    returned = [name for layer in layers for name in layer.output if name and name in read_after]
    other = [
        (renames[n], graph.non_tensor_outputs[n].SerializeToString(deterministic=True))
        for n in returned
        if n not in graph.specs and n in graph.non_tensor_outputs
    ]
    outputs = [(renames[name], boundary_spec(name)) for name in returned if name not in graph.non_tensor_outputs]
    if not outputs and not other:
        raise UnbuildableBrick("the layers produce nothing that the rest of the model reads")
    needed = sum(spec.nbytes for _, spec in (*inputs, *weights, *outputs))
    if needed > (limit := memory_limit()):
        raise UnbuildableBrick(
            f"its inputs, weights and outputs together would need {format_bytes(needed)}, more than the"
            f" {format_bytes(limit)} memory limit; refused before allocating them"
        )
    nodes = tuple(_renamed(layer, renames, f"body{index}_") for index, layer in enumerate(layers))
    functions = tuple(
        _anonymous(f) for f in graph.functions if any((n.domain, n.op_type) == (f.domain, f.name) for n in nodes)
    )
    opsets = _used_opsets(nodes, graph.opset_imports)
    signature = _signature(
        nodes,
        inputs,
        weights,
        outputs,
        values,
        opsets,
        functions,
        activations,
        other,
        unsized=graph.unsized,
        weights_as_inputs=weights_as_inputs,
    )
    return BrickSpec(
        nodes=nodes,
        inputs=tuple(inputs),
        weights=tuple(weights),
        outputs=tuple(outputs),
        values=values,
        opset_imports=dict(graph.opset_imports),
        ir_version=graph.ir_version,
        functions=functions,
        signature=signature,
        non_tensor_outputs=tuple(other),
        activations=frozenset(activations),
        unsized=graph.unsized,
        weights_as_inputs=frozenset(weights_as_inputs),
    )


def brick_signature(brick: BrickSpec) -> str:
    """The signature ``brick``'s parts give, computed again (a brick read back from a file, for example)."""
    opsets = _used_opsets(brick.nodes, brick.opset_imports)
    return _signature(
        brick.nodes,
        brick.inputs,
        brick.weights,
        brick.outputs,
        brick.values,
        opsets,
        brick.functions,
        brick.activations,
        brick.non_tensor_outputs,
        unsized=brick.unsized,
        weights_as_inputs=brick.weights_as_inputs,
    )


def _used_opsets(nodes: Sequence[onnx.NodeProto], opset_imports: dict[str, int]) -> dict[str, int]:
    used_domains = {node.domain for node in nodes} | {""}
    return {domain: opset_imports[domain] for domain in sorted(used_domains) if domain in opset_imports}


def _anonymous(function: onnx.FunctionProto) -> onnx.FunctionProto:
    """A copy of a model-local function without its documentation, value infos or its nodes' names."""
    copy = onnx.FunctionProto()
    copy.CopyFrom(function)
    copy.ClearField("doc_string")
    copy.ClearField("metadata_props")
    copy.ClearField("value_info")
    for node in copy.node:
        _strip(node)
    return copy


def brick_input_names(graph: ModelGraph, begin: int, end: int) -> list[str]:
    """The values layers ``[begin, end)`` read from before them, weights aside, in the order of the brick's
    inputs (see :func:`describe_brick`)."""
    produced = {name for layer in graph.layers[begin:end] for name in layer.output if name}
    reads = (name for index in range(begin, end) for name in graph.layer_reads[index])
    return [name for name in dict.fromkeys(reads) if name not in produced and name not in graph.weights]


def _read_outside(graph: ModelGraph, begin: int, end: int) -> set[str]:
    """Values read by layers outside ``[begin, end)`` or returned by the model."""
    outputs = {name for layer in graph.layers[begin:end] for name in layer.output if name}
    return {
        name
        for name in outputs
        if name in graph.outputs or any(not begin <= reader < end for reader in graph.readers.get(name, ()))
    }


def _renamed(node: onnx.NodeProto, renames: dict[str, str], prefix: str) -> onnx.NodeProto:
    """A copy of ``node`` with canonical value names, no names of its own, and canonical subgraphs."""
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    _strip(copy)
    copy.input[:] = [renames.get(name, name) for name in node.input]
    copy.output[:] = [renames.get(name, name) for name in node.output]
    for attribute in copy.attribute:
        for index, body in enumerate(_bodies(attribute)):
            _canonicalize_body(body, renames, f"{prefix}{attribute.name}{index}_")
    return copy


def _canonicalize_body(body: onnx.GraphProto, outer: dict[str, str], prefix: str) -> None:
    """Make a subgraph independent of the source model: canonical local names, outer names as the
    brick's, no node or graph names, and weights replaced by a constant of the same type and shape."""
    local = [v.name for v in body.input] + [t.name for t in body.initializer]
    local += [name for node in body.node for name in node.output if name]
    renames = {**outer, **{name: f"{prefix}{i}" for i, name in enumerate(dict.fromkeys(local))}}
    body.name = "body"
    body.ClearField("doc_string")
    for value in [*body.input, *body.output, *body.value_info]:
        value.name = renames.get(value.name, value.name)
        value.ClearField("doc_string")
    for tensor in body.initializer:
        _blank_weight(tensor)
        tensor.name = renames[tensor.name]
    for index, node in enumerate(body.node):
        _strip(node)
        node.input[:] = [renames.get(name, name) for name in node.input]
        node.output[:] = [renames.get(name, name) for name in node.output]
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.TENSOR:
                _blank_weight(attribute.t)
            for inner_index, inner in enumerate(_bodies(attribute)):
                _canonicalize_body(inner, renames, f"{prefix}{index}{attribute.name}{inner_index}_")


def _bodies(attribute: onnx.AttributeProto) -> list[onnx.GraphProto]:
    if attribute.type == onnx.AttributeProto.GRAPH:
        return [attribute.g]
    return list(attribute.graphs)


def _strip(node: onnx.NodeProto) -> None:
    node.ClearField("name")
    node.ClearField("doc_string")
    node.ClearField("metadata_props")


def _blank_weight(tensor: onnx.TensorProto) -> None:
    """Replace a float or quantized weight's values by a constant, keeping a scalar (an epsilon, an exponent)
    and what else steers computation as it is."""
    spec = TensorSpec(tensor.data_type, tuple(tensor.dims))
    if not (spec.is_float or is_quantized_data(spec.dtype, spec.shape)) or spec.steers(constant=True):
        return
    dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)
    tensor.CopyFrom(numpy_helper.from_array(np.full(spec.shape, BODY_WEIGHT, dtype=dtype), tensor.name))


def _signature(
    nodes: Sequence[onnx.NodeProto],
    inputs: Sequence[tuple[str, TensorSpec]],
    weights: Sequence[tuple[str, TensorSpec]],
    outputs: Sequence[tuple[str, TensorSpec]],
    values: Mapping[str, np.ndarray],
    opsets: dict[str, int],
    functions: Sequence[onnx.FunctionProto],
    activations: Iterable[str] = (),
    non_tensor_outputs: Sequence[tuple[str, bytes]] = (),
    *,
    unsized: bool = False,
    weights_as_inputs: Iterable[str] = (),
) -> str:
    """SHA-256 of a canonical JSON of everything that determines the brick's work, never weight values.

    Kept activations count by their presence only (their effect shows in the output shapes), so a
    suite that withholds them still checks its bricks; text values count by their text; weights listed
    as inputs count as such.
    """
    activations = frozenset(activations)

    def tensor(name: str, spec: TensorSpec) -> list[object]:
        kept = values.get(name)
        if name in activations:
            return [name, spec.dtype, list(spec.shape), "activation"]
        digest = _value_digest(kept) if kept is not None else None
        return [name, spec.dtype, list(spec.shape), digest]

    document: dict[str, object] = {
        "opsets": opsets,
        "nodes": [
            [
                node.domain,
                node.op_type,
                list(node.input),
                list(node.output),
                [
                    _digest(a.SerializeToString(deterministic=True))
                    for a in sorted(node.attribute, key=lambda a: a.name)
                ],
            ]
            for node in nodes
        ],
        "inputs": [tensor(name, spec) for name, spec in inputs],
        "weights": [tensor(name, spec) for name, spec in weights],
        "outputs": [[name, spec.dtype, list(spec.shape)] for name, spec in outputs],
        "functions": [_digest(f.SerializeToString(deterministic=True)) for f in functions],
    }
    if non_tensor_outputs:  # absent otherwise, so that the signatures of all other bricks stay as they were
        document["non_tensor_outputs"] = [[name, _digest(type_bytes)] for name, type_bytes in non_tensor_outputs]
    if unsized:  # likewise
        document["unsized"] = True
    if weights_as_inputs:  # likewise: the same layers run otherwise when their weights are inputs
        document["weights_as_inputs"] = sorted(weights_as_inputs)
    return _digest(json.dumps(document, sort_keys=True, separators=(",", ":")).encode())


def _value_digest(value: np.ndarray) -> str:
    if value.dtype.kind == "O":
        return _digest(json.dumps([str(item) for item in value.ravel()]).encode() + repr(value.shape).encode())
    return _digest(np.ascontiguousarray(value).tobytes())


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
