"""A model's parts as its file gives them, and their checks: weights (dense, sparse, in external data), inputs with
their declared and concrete sizes, nodes in order, constants folded."""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path

import networkx as nx
import numpy as np
import onnx
from onnx import external_data_helper, numpy_helper

from ..core.errors import ModelError, describe_error
from ..core.graph import MIN_IR_VERSION, TensorSpec, is_tensor_type, nested_tensors, node_inputs, subgraphs
from ..core.settings import DEFAULT_DIM
from .ordering import canonical_order, content_keys
from .samples import SampleInputs

#: Operators whose output changes from run to run: never folded into weights.
NONDETERMINISTIC_OPS = frozenset(
    {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"}
)


#: Ultralytics' metadata entry of the image size its detectors expect, ``[height, width]``.
_IMAGE_SIZE = re.compile(r"\[\s*(\d+)\s*,\s*(\d+)\s*\]")


#: Digits of a size read from metadata: more is no size (and Python refuses to convert thousands).
_MAX_DIGITS = 18


def _stated_dims(model: onnx.ModelProto) -> dict[str, int]:
    """Sizes a model states for its dimensions in its metadata: an entry named after the dimension with a
    whole number (``batch = 1``), or Ultralytics' ``imgsz = [H, W]`` for ``height`` and ``width``."""
    stated: dict[str, int] = {}
    for entry in model.metadata_props:
        value = entry.value.strip()
        image = _IMAGE_SIZE.fullmatch(value) if entry.key == "imgsz" else None
        if value.isdecimal() and len(value) <= _MAX_DIGITS and int(value) > 0:
            stated[entry.key] = int(value)
        elif image is not None and all(len(size) <= _MAX_DIGITS for size in image.groups()):
            stated.setdefault("height", int(image[1]))
            stated.setdefault("width", int(image[2]))
    return stated


def _declare_inputs(graph: onnx.GraphProto, declared: Mapping[str, onnx.ValueInfoProto]) -> None:
    """Put back the inputs' declarations in ``declared`` (their symbolic dimensions) in place of the sized ones,
    and forget the shapes the graph states of other values: those a converter inferred at the concrete
    sizes contradict onnxruntime's inference as the sized inputs did."""
    inputs = [declared.get(value.name, value) for value in graph.input]
    graph.ClearField("input")
    graph.input.extend(inputs)
    _forget_value_info(graph)


def _forget_value_info(graph: onnx.GraphProto) -> None:
    graph.ClearField("value_info")
    for node in graph.node:
        for body in subgraphs(node):
            _forget_value_info(body)


def _with_dims_of(value: onnx.ValueInfoProto, declared: onnx.ValueInfoProto) -> onnx.ValueInfoProto:
    """A copy of ``value`` (its type stays its own: a converted model's may differ) with the symbolic dimensions
    ``declared`` gives the same axes."""
    result = onnx.ValueInfoProto.FromString(value.SerializeToString())
    for dim, given in zip(result.type.tensor_type.shape.dim, declared.type.tensor_type.shape.dim):
        if _symbolic(given):
            dim.CopyFrom(given)
    return result


def _symbolic(dim: onnx.TensorShapeProto.Dimension) -> bool:
    return not dim.HasField("dim_value") or dim.dim_value <= 0


def _has_cycle(nodes: Iterable[onnx.NodeProto]) -> bool:
    """Whether the nodes of one graph read, through each other, their own outputs."""
    nodes = list(nodes)
    producer = {name: index for index, node in enumerate(nodes) for name in node.output if name}
    graph = nx.DiGraph()
    graph.add_edges_from(
        (producer[name], index) for index, node in enumerate(nodes) for name in node_inputs(node) if name in producer
    )
    return not nx.is_directed_acyclic_graph(graph)


def _spec_of(value_type: onnx.TypeProto) -> TensorSpec | None:
    if not value_type.HasField("tensor_type"):
        return None
    tensor_type = value_type.tensor_type
    if not tensor_type.HasField("shape") or not is_tensor_type(tensor_type.elem_type):
        return None
    shape = []
    for dim in tensor_type.shape.dim:
        if not dim.HasField("dim_value") or dim.dim_value < 0:
            return None
        shape.append(dim.dim_value)
    return TensorSpec(tensor_type.elem_type, tuple(shape))


class ModelParts:
    """One model's parts as its file gives them, checked and put in order; :class:`~.loading._ModelLoader`, which
    extends it, goes on to the shapes and the reference run."""

    def __init__(
        self,
        path: Path,
        model: onnx.ModelProto,
        dims: dict[str, int],
        data_dir: Path,
        sample: SampleInputs | None,
        *,
        sample_matched: bool = False,
        runtime_graph: bool = False,
    ) -> None:
        self.path = path
        #: The user's input values, checked against the model's inputs by :meth:`.loading._ModelLoader.prepare` unless
        #: ``sample_matched`` (a model made from one they were checked against: optimized or converted).
        self.sample = sample
        self.sample_matched = sample_matched
        #: Whether onnxruntime is known to load the model: it made this graph, or it was asked.
        self.runtime_loads = runtime_graph
        #: Whether onnxruntime made this graph, to run as it is.
        self.runtime_graph = runtime_graph
        #: Folder external data locations are relative to.
        self.data_dir = data_dir
        self.model = model
        self.dims = dims
        self.guessed: dict[str, int] = {}
        #: Sizes the sample inputs gave symbolic dimensions, by the names they answer to.
        self.sampled: dict[str, int] = {}
        self.dim_names: tuple[str, ...] = ()
        #: The inputs with symbolic dimensions as the file declares them, kept by :meth:`_fix_input_dims`.
        self.declared_inputs: dict[str, onnx.ValueInfoProto] = {}
        #: Whether onnxruntime is given those declarations instead of concrete sizes: it refuses the
        #: model sized (see :meth:`.loading._ModelLoader.on_runtime`), and so would it the bricks, or it
        #: runs more nodes with them (see :func:`.loading._declared_if_it_runs_more`).
        self.unsized = False
        #: Specs of the values shape inference can tell, made by :meth:`.loading._ModelLoader.prepare`.
        self.specs: dict[str, TensorSpec] = {}
        graph = model.graph
        self.initializers = {t.name: t for t in graph.initializer}
        #: Weights stored as ``sparse_initializer``, by name: weights like the others, densified only
        #: where their values are read.
        self.sparse = {t.values.name: t for t in graph.sparse_initializer}
        self.inputs = [v.name for v in graph.input if v.name not in self.initializers and v.name not in self.sparse]
        #: Initializers the file also lists as inputs: from IR 4 on, onnxruntime lets a caller override them
        #: and so treats them as no constants (before IR 4 every initializer is listed, and constant).
        self.weights_as_inputs = frozenset(
            v.name for v in graph.input if v.name in self.initializers and model.ir_version >= MIN_IR_VERSION
        )
        self.outputs = [v.name for v in graph.output]

    def weight_bytes(self) -> int:
        """Bytes of the model's dense weights, as their declarations give them (8 an element of a type numpy
        does not know)."""
        total = 0
        for tensor in self.initializers.values():
            try:
                size = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
            except (KeyError, ValueError, TypeError):
                size = 8
            total += math.prod(tensor.dims) * size
        return total

    def _opset_imports(self) -> dict[str, int]:
        return {o.domain or "": o.version for o in self.model.opset_import}

    def declared_model(self) -> onnx.ModelProto:
        """A copy of the model with its inputs as the file declares them."""
        model = onnx.ModelProto()
        model.CopyFrom(self.model)
        _declare_inputs(model.graph, self.declared_inputs)
        return model

    def _sparse_parts(self) -> list[onnx.TensorProto]:
        """The values and indices of the sparse weights, each checked as a weight of its own."""
        return [part for sparse in self.sparse.values() for part in (sparse.values, sparse.indices)]

    def _sparse_specs(self) -> dict[str, TensorSpec]:
        """The sparse weights as the dense tensors they stand for; a negative dimension is refused."""
        specs = {}
        for name, sparse in self.sparse.items():
            if any(dim < 0 for dim in sparse.dims):
                raise ModelError(
                    self.path, f"weight {name!r} has a negative dimension in its shape {list(sparse.dims)}"
                )
            specs[name] = TensorSpec(sparse.values.data_type, tuple(sparse.dims))
        return specs

    def _dense(self, name: str) -> onnx.TensorProto:
        """A sparse weight as a dense tensor (only ever one whose values are read: small, see ``steers``)."""
        sparse = self.sparse[name]
        base_dir = str(self.data_dir)
        try:
            values = numpy_helper.to_array(sparse.values, base_dir)
            indices = numpy_helper.to_array(sparse.indices, base_dir).astype(np.int64)
            shape = tuple(sparse.dims)
            dense = np.zeros(math.prod(shape), values.dtype)
            # Indices are linear positions ([NNZ]) or coordinates ([NNZ, rank]), as ONNX allows.
            flat = indices if indices.ndim == 1 else np.ravel_multi_index(tuple(indices.T), shape)
            dense[flat] = values
        except (ValueError, TypeError, IndexError, OSError) as error:
            raise ModelError(self.path, f"sparse weight {name!r} cannot be read: {describe_error(error)}") from None
        return numpy_helper.from_array(dense.reshape(shape), name)

    def _check_external_data(self) -> None:
        """Every external weight file lies in the model's folder and is long enough.

        Weights of the graph itself are not read here (only where a value is needed). Tensors stored
        inside nodes (in If, Loop and Scan bodies, Constant values) are read into the node once checked,
        so that a layer, and every brick holding it, is whole without the model's folder.
        """
        folder = self.data_dir.resolve()
        for tensor in [*self.initializers.values(), *self._sparse_parts()]:
            if external_data_helper.uses_external_data(tensor):
                self._check_external_tensor(folder, tensor)
        for tensor in nested_tensors(self.model.graph):
            if external_data_helper.uses_external_data(tensor):
                self._check_external_tensor(folder, tensor)
                self._read_into(folder, tensor)

    def _read_into(self, folder: Path, tensor: onnx.TensorProto) -> None:
        try:
            external_data_helper.load_external_data_for_tensor(tensor, str(folder))
        except (OSError, ValueError) as error:
            raise ModelError(self.path, f"weight {tensor.name!r} cannot be read: {describe_error(error)}") from None
        tensor.data_location = onnx.TensorProto.DEFAULT
        del tensor.external_data[:]

    def _check_external_tensor(self, folder: Path, tensor: onnx.TensorProto) -> None:
        try:
            with warnings.catch_warnings():  # onnx warns of unknown keys, which it ignores, and so do we
                warnings.simplefilter("ignore")
                info = external_data_helper.ExternalDataInfo(tensor)
        except ValueError as error:
            raise ModelError(
                self.path,
                f"weight {tensor.name!r} has an external data offset or length that is not a byte count:"
                f" {describe_error(error)}",
            ) from None
        location = str(info.location)
        if "\0" in location or not location:
            raise ModelError(self.path, f"weight {tensor.name!r} has external data with no usable file name")
        if Path(location).is_absolute():
            raise ModelError(
                self.path,
                f"weight {tensor.name!r} points to external data by the absolute path {location!r}; refused, the"
                " file was not read (external data must lie in the model's folder)",
            )
        try:
            target = (folder / location).resolve()
            if not target.is_relative_to(folder):
                raise ModelError(
                    self.path,
                    f"weight {tensor.name!r} points to external data {location!r} outside the model's"
                    " folder; refused, the file was not read",
                )
            if not target.is_file():
                raise ModelError(self.path, f"external data file {location!r} of weight {tensor.name!r} is missing")
            size = target.stat().st_size
        except OSError as error:
            raise ModelError(
                self.path, f"cannot check external data file {location!r}: {error.strerror or error}"
            ) from None
        needed = (info.offset or 0) + (info.length or TensorSpec(tensor.data_type, tuple(tensor.dims)).nbytes)
        if size < needed:
            raise ModelError(
                self.path,
                f"external data file {location!r} holds {size} bytes, but weight {tensor.name!r} needs bytes up"
                f" to {needed}",
            )

    def _fix_input_dims(self) -> None:
        """Replace the symbolic dimensions of the model inputs by concrete sizes. An input the sample gives
        takes the sample's sizes, which also go to the dimensions of the same name elsewhere; any other
        axis takes the user's size for the axis (``x[2]``), else the sample's or the user's for its name,
        else the size the model's metadata states, else the default.

        A name made of ``?`` only (exporters' "unknown") is no name: such axes answer to ``x[2]`` alone.
        """
        stated = _stated_dims(self.model)
        given = self.sample.values if self.sample is not None else {}
        inputs = [
            value
            for value in self.model.graph.input
            if value.name not in self.initializers and value.type.HasField("tensor_type")
        ]
        sampled: dict[str, int] = {}
        names: dict[str, None] = {}
        for value in inputs:
            if any(_symbolic(dim) for dim in value.type.tensor_type.shape.dim):
                self.declared_inputs[value.name] = onnx.ValueInfoProto.FromString(value.SerializeToString())
        for value in sorted(inputs, key=lambda value: value.name not in given):
            sample = given.get(value.name)
            for axis, dim in enumerate(value.type.tensor_type.shape.dim):
                if not _symbolic(dim):
                    continue
                axis_name = f"{value.name}[{axis}]"
                name = dim.dim_param if dim.dim_param.strip("?") else axis_name
                names.update(dict.fromkeys([name, axis_name]))
                if sample is not None:
                    size = sampled[name] = sample.shape[axis]
                else:
                    size = self.dims.get(axis_name, sampled.get(name, self.dims.get(name, stated.get(name))))
                if size is None:
                    size = self.guessed[name] = DEFAULT_DIM
                dim.Clear()
                dim.dim_value = size
        self.dim_names = tuple(names)
        self.sampled = sampled

    def _check_subgraphs(self, nodes: Iterable[onnx.NodeProto]) -> None:
        """No subgraph (If, Loop, Scan body), at any depth, has a cycle: its real cause, before the
        outer graph reads the body's cyclic names as values of the enclosing scope."""
        for node in nodes:
            for attribute in node.attribute:
                bodies = [attribute.g] if attribute.type == onnx.AttributeProto.GRAPH else attribute.graphs
                for body in bodies:
                    if _has_cycle(body.node):
                        raise ModelError(
                            self.path,
                            f"the {attribute.name} of node {node.name or node.op_type!r} has a cycle, so it cannot"
                            " be executed",
                        )
                    self._check_subgraphs(body.node)

    def _sort_nodes(self) -> None:
        """Put the model's nodes in the topological order of :mod:`.ordering`, whatever the file's order."""
        nodes = list(self.model.graph.node)
        producer: dict[str, int] = {}
        for index, node in enumerate(nodes):
            for name in node.output:
                if name in producer and name:
                    raise ModelError(self.path, f"value {name!r} is produced by more than one node")
                producer[name] = index
        graph = nx.DiGraph()
        graph.add_nodes_from(range(len(nodes)))
        known = set(self.initializers) | set(self.sparse) | set(self.inputs)
        reads = [node_inputs(node) for node in nodes]
        for index, node in enumerate(nodes):
            for name in reads[index]:
                if name in producer:
                    graph.add_edge(producer[name], index)
                elif name not in known:
                    raise ModelError(
                        self.path, f"node {node.name or node.op_type!r} reads {name!r}, which nothing produces"
                    )
        sources = {name: f"input{position}" for position, name in enumerate(self.inputs)}
        sources.update({t.name: f"weight:{t.data_type}:{list(t.dims)}" for t in self.initializers.values()})
        sources.update({name: f"weight:{spec.dtype}:{list(spec.shape)}" for name, spec in self._sparse_specs().items()})
        try:
            order = canonical_order(graph, content_keys(nodes, graph, reads, sources, self.outputs))
        except nx.NetworkXUnfeasible as error:
            raise ModelError(self.path, "the graph has a cycle, so it cannot be executed") from error
        if order != sorted(order):
            reordered = [onnx.NodeProto.FromString(nodes[index].SerializeToString()) for index in order]
            self.model.graph.ClearField("node")
            self.model.graph.node.extend(reordered)

    def _fold_constants(self, nodes: list[onnx.NodeProto]) -> tuple[set[str], set[int]]:
        """Names of all weights and the indices of the nodes that only compute constants: a node reading a
        weight a caller may override (see :attr:`weights_as_inputs`) is a layer, as onnxruntime runs it."""
        constants = (set(self.initializers) | set(self.sparse)) - self.weights_as_inputs
        constant_nodes: set[int] = set()
        for index, node in enumerate(nodes):
            if node.op_type in NONDETERMINISTIC_OPS:
                continue
            if all(name in constants for name in node_inputs(node)):
                constants.update(name for name in node.output if name)
                constant_nodes.add(index)
        return constants | self.weights_as_inputs, constant_nodes

    def _live(self, layers: list[onnx.NodeProto]) -> list[onnx.NodeProto]:
        """Layers whose work reaches a model output; runtimes drop the others."""
        needed = set(self.outputs)
        live: list[onnx.NodeProto] = []
        for layer in reversed(layers):
            if any(name in needed for name in layer.output):
                live.append(layer)
                needed.update(node_inputs(layer))
        return live[::-1]

    def _values_layers_touch(self, layers: list[onnx.NodeProto]) -> list[str]:
        """Values layers read or write that matter: read by a layer or a model output, in order."""
        reads = [node_inputs(layer) for layer in layers]
        read = {name for names in reads for name in names} | set(self.outputs)
        needed: dict[str, None] = {}
        for layer, names in zip(layers, reads):
            needed.update(dict.fromkeys(names + [n for n in layer.output if n in read]))
        return list(needed)

    def _declared_specs(self) -> dict[str, TensorSpec]:
        """Specs of the model's inputs (with concrete dimensions) and weights, as the file declares them."""
        specs = {value.name: _spec_of(value.type) for value in self.model.graph.input}
        specs.update((t.name, TensorSpec(t.data_type, tuple(t.dims))) for t in self.initializers.values())
        specs.update(self._sparse_specs())
        return {name: spec for name, spec in specs.items() if spec is not None}

    def _read_constant_values(self, names: Iterable[str]) -> dict[str, np.ndarray]:
        """Real values of constants stored in the file itself (initializers and Constant nodes)."""
        constant_attributes = {
            node.output[0]: node.attribute[0]
            for node in self.model.graph.node
            if node.op_type == "Constant" and not node.domain and len(node.attribute) == 1
        }
        base_dir = str(self.data_dir)
        values: dict[str, np.ndarray] = {}
        for name in names:
            try:
                if name in self.initializers:
                    values[name] = numpy_helper.to_array(self.initializers[name], base_dir)
                elif name in self.sparse:
                    values[name] = numpy_helper.to_array(self._dense(name))
                elif name in constant_attributes and constant_attributes[name].name == "value":
                    values[name] = numpy_helper.to_array(constant_attributes[name].t)
            except (ValueError, TypeError, KeyError, OSError) as error:  # data that does not match its type or shape
                raise ModelError(self.path, f"weight {name!r} cannot be read: {describe_error(error)}") from None
        return values
