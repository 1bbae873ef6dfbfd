"""Load an ONNX model into the view the cutter needs: compute layers in order, value specs, weights.

Weights are everything a model can compute without its inputs (initializers, Constant nodes and
constant subgraphs such as old exporters' ConstantOfShape weights); they are not layers. Values
that steer computation (integer, boolean and string tensors, tiny tensors, and whatever feeds a
shape, size or scale slot such as Resize's scales) keep their real values, so that every brick does
the same work as inside the model; so do the activations read near an operator whose work depends
on its data (If, NonZero, ...), as the reference run computed them. Inputs are the user's sample
inputs where given (see :mod:`.samples`), else synthetic; the reference run runs on them. Their
sizes are written into the model onnxruntime is given, unless it refuses them there (see
:meth:`_ModelLoader.on_runtime`) or runs more nodes without them (see :func:`_declared_if_it_runs_more`).
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import tempfile
import warnings
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TypeVar

import networkx as nx
import numpy as np
import onnx
from onnx import external_data_helper, numpy_helper, shape_inference

from .errors import ModelError, RuntimeRefusal, describe_error, dims_hint
from .graph import (
    DATA_DEPENDENT_OPS,
    MAX_KEPT_INTEGER_ELEMENTS,
    MIN_IR_VERSION,
    ModelGraph,
    TensorSpec,
    data_dependent_ops,
    is_tensor_type,
    nested_tensors,
    node_inputs,
    steering_slot_values,
    subgraphs,
)
from .ordering import canonical_order, content_keys
from .runtime import load_refusal, optimize_model, run_reference
from .samples import SampleInputs, match_inputs
from .screening import (
    check_model_file,
    check_packed_weights,
    check_runtime_accepts,
    check_text,
    check_values,
    check_weights,
)
from .settings import DEFAULT_DIM, Settings
from .synthetic import model_feeds

#: Operators whose output changes from run to run: never folded into weights.
NONDETERMINISTIC_OPS = frozenset(
    {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"}
)
#: Ultralytics' metadata entry of the image size its detectors expect, ``[height, width]``.
_IMAGE_SIZE = re.compile(r"\[\s*(\d+)\s*,\s*(\d+)\s*\]")
#: Digits of a size read from metadata: more is no size (and Python refuses to convert thousands).
_MAX_DIGITS = 18
#: Float weights up to this many elements keep their values for shape inference (Resize scales, Range
#: bounds); larger ones are declared by type and shape only.
MAX_INFERENCE_FLOAT_ELEMENTS = 1024

#: A memory-backed folder (Linux) for the optimized graphs, when it has room (see :func:`scratch_folder`).
MEMORY_FOLDER = Path("/dev/shm")

_Result = TypeVar("_Result")


def load_model(
    path: Path,
    dims: Mapping[str, int] | None = None,
    optimize: Settings | None = None,
    convert: Callable[[onnx.ModelProto, Path], onnx.ModelProto] | None = None,
    sample: SampleInputs | None = None,
    reach: int = 1,
) -> ModelGraph:
    """Parse ``path`` into a :class:`ModelGraph`; raises :class:`ModelError` for anything unusable.

    With ``optimize``, the layers are those of the graph onnxruntime makes of the model for those
    settings (fusions, eliminated nodes, layout changes): what actually runs, at the price of bricks
    specific to the runtime, provider and machine. ``convert(model, data_dir)``, given, turns the
    model (its inputs sized) into another before it is optimized and cut, for example to int8; it
    raises ``ValueError`` when it cannot. ``sample`` gives real values to some or all inputs, and
    their sizes to the symbolic dimensions they fill; ``reach`` is how many layers around an operator
    whose work depends on its data keep the real values of what they read (the granularity).

    onnxruntime is the authority on what runs: onnx's checker and shape inference only help, and a
    model onnxruntime refuses while symbolic dimensions were left at :data:`DEFAULT_DIM` says so.
    """
    loader = _prepared(path, dims, sample)
    try:
        return _load(path, _converted(path, loader, convert), optimize, reach)
    except RuntimeRefusal as error:
        if not loader.guessed:
            raise
        raise ModelError(path, error.cause + dims_hint(list(loader.guessed), DEFAULT_DIM)) from error


def _load(path: Path, loader: _ModelLoader, optimize: Settings | None, reach: int) -> ModelGraph:
    if optimize is None:
        return loader.load(reach)
    memory = scratch_folder(loader.weight_bytes())
    with contextlib.ExitStack() as folders:
        written: list[Path] = []

        def optimized_in_scratch(model: onnx.ModelProto) -> onnx.ModelProto:
            folder = Path(folders.enter_context(tempfile.TemporaryDirectory(prefix="dlbricks-", dir=memory)))
            try:
                optimized = optimize_model(path, model, path.parent, folder, optimize)
            except RuntimeRefusal:
                if memory is None:
                    raise
                # The memory folder may have filled up since it was checked (other processes write there too).
                folder = Path(folders.enter_context(tempfile.TemporaryDirectory(prefix="dlbricks-")))
                optimized = optimize_model(path, model, path.parent, folder, optimize)
            written.append(folder)
            return optimized

        optimized, folder = loader.on_runtime(optimized_in_scratch), written[-1]
        declared = _declared_if_it_runs_more(loader, optimized, optimized_in_scratch)
        if declared is not None:
            optimized, folder = declared, written[-1]
        runtime_loader = loader.derived(optimized, folder, runtime_graph=True)
        return runtime_loader.load(reach)


def _declared_if_it_runs_more(
    loader: _ModelLoader, optimized: onnx.ModelProto, optimize: Callable[[onnx.ModelProto], onnx.ModelProto]
) -> onnx.ModelProto | None:
    """The graph onnxruntime runs for the file's inputs as it declares them, where it holds more nodes than
    the one made at concrete sizes (``optimized``): the loader then gives onnxruntime those declarations,
    and its bricks declare none either (see :attr:`.ModelGraph.unsized`); else None.

    At concrete sizes onnxruntime folds what a model computes from its tensors' sizes (Shape, Gather,
    Range, position buckets, attention masks' shapes); the file, with symbolic sizes, computes it on every
    call: T5's file ran 324 nodes where its sized graph ran 149, and took 1.4-1.6 times as long.
    """
    if loader.unsized or not loader.declared_inputs:
        return None
    try:
        declared = optimize(loader.declared_model())
    except RuntimeRefusal:
        return None
    if len(declared.graph.node) <= len(optimized.graph.node):
        return None
    loader.unsized = True
    return declared


def scratch_folder(weight_bytes: int) -> str | None:
    """Where a model's optimized graph is written: :data:`MEMORY_FOLDER` when it is there, writable, and
    has room for twice the model's weights; else the system's temporary folder (None).

    onnxruntime writes the optimized graph's weights apart, and the run that learns shapes reads them
    back: on disk, writing them cost 2.4 s of the 9 light CNNs' 3.4 s optimize step, 1.4 s in memory.
    """
    try:
        room = shutil.disk_usage(MEMORY_FOLDER).free
    except OSError:
        return None
    return str(MEMORY_FOLDER) if os.access(MEMORY_FOLDER, os.W_OK) and room >= 2 * weight_bytes else None


def whole_model(
    path: Path,
    dims: Mapping[str, int] | None = None,
    convert: Callable[[onnx.ModelProto, Path], onnx.ModelProto] | None = None,
    sample: SampleInputs | None = None,
) -> tuple[onnx.ModelProto | Path, dict[str, np.ndarray]]:
    """The model as the user runs it, with its real weights, and its inputs: the file itself (onnxruntime
    reads it), or the converted model for another numeric type; sample values where given, else synthetic."""
    loader = _prepared(path, dims, sample)
    if convert is None:
        return path, loader.feeds()
    converted = _converted(path, loader, convert)
    # Run, as the file is, with its inputs as it declares them where onnxruntime loads them so: what the
    # converted model computes from its sizes counts, as its cut counts it (see _declared_if_it_runs_more).
    if converted.accept_declared_sizes():  # onnxruntime loaded it so: not loaded again
        return converted.runnable_model(), converted.feeds()
    return converted.on_runtime(converted.loaded), converted.feeds()


def _prepared(path: Path, dims: Mapping[str, int] | None, sample: SampleInputs | None) -> _ModelLoader:
    loader = _ModelLoader(path, _read(path), dict(dims or {}), path.parent, sample)
    loader.prepare()
    return loader


def _converted(
    path: Path, loader: _ModelLoader, convert: Callable[[onnx.ModelProto, Path], onnx.ModelProto] | None
) -> _ModelLoader:
    if convert is None:
        return loader
    try:
        # A conversion writes a new model: its weights are plain initializers, as onnxruntime's tools write them.
        converted = convert(loader.runnable_model(weight_inputs=False), path.parent)
    except ValueError as error:
        raise ModelError(path, str(error)) from error
    return loader.derived(converted, path.parent)


def _read(path: Path) -> onnx.ModelProto:
    check_model_file(path)
    try:
        data = path.read_bytes()
    except OSError as error:
        raise ModelError(path, f"cannot read the file: {error.strerror or error}") from error
    if not data:
        raise ModelError(path, "the file is empty, not an ONNX model")
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception as error:  # protobuf raises its own DecodeError, and others on odd input
        raise ModelError(path, f"not an ONNX model (the protobuf does not parse: {describe_error(error)})") from error
    if not model.HasField("graph") or not model.graph.node:
        raise ModelError(path, "not an ONNX model: it has no graph with nodes")
    return model


class _ModelLoader:
    """One load of one model; split into steps so each stays short."""

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
        #: The user's input values, checked against the model's inputs by :meth:`prepare` unless
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
        self.dim_names: tuple[str, ...] = ()
        #: The inputs with symbolic dimensions as the file declares them, kept by :meth:`_fix_input_dims`.
        self.declared_inputs: dict[str, onnx.ValueInfoProto] = {}
        #: Whether onnxruntime is given those declarations instead of concrete sizes: it refuses the
        #: model sized (see :meth:`on_runtime`), and so would it the bricks, or it runs more nodes with
        #: them (see :func:`_declared_if_it_runs_more`).
        self.unsized = False
        #: Specs of the values shape inference can tell, made by :meth:`prepare`.
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

    def prepare(self) -> None:
        """Check and order the model, and give its inputs concrete dimensions; refuse, before onnxruntime
        or anything else allocates for it, what cannot be used (see :mod:`.screening`)."""
        check_text(self.path, self.model)
        self._check_subgraphs(self.model.graph.node)
        self._sort_nodes()
        nested = nested_tensors(self.model.graph)
        check_weights(self.path, [*self.initializers.values(), *self._sparse_parts(), *nested])
        check_runtime_accepts(self.path, self.model.ir_version, self._opset_imports())
        self._check_external_data()
        self._check_structure()
        if self.sample is not None and not self.sample_matched:
            real_inputs = [value for value in self.model.graph.input if value.name not in self.initializers]
            self.sample = match_inputs(self.path, self.sample, real_inputs)
        self._fix_input_dims()
        given = self.sample.values if self.sample is not None else {}
        weights = [*self.initializers, *self.sparse]
        check_values(self.path, self._declared_specs(), self.inputs, weights, given)
        self.specs = self._infer_specs()
        check_values(self.path, self.specs, self.inputs, weights, given)
        check_packed_weights(self.path, self.model.graph.node, self.specs, weights)

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

    def feeds(self) -> dict[str, np.ndarray]:
        """The model's inputs: the sample's values (in the type this model takes them), else synthetic."""
        given = self.sample.values if self.sample is not None else {}
        for name in self.inputs:
            if name not in self.specs:
                raise ModelError(self.path, f"model input {name!r} is not a tensor; only tensor inputs are supported")
        feeds = model_feeds([(name, self.specs[name]) for name in self.inputs if name not in given])
        for name, value in given.items():
            dtype = onnx.helper.tensor_dtype_to_np_dtype(self.specs[name].dtype)
            feeds[name] = value if value.dtype == dtype or dtype.kind == "O" else value.astype(dtype)
        return {name: feeds[name] for name in self.inputs}

    def runnable_model(self, *, weight_inputs: bool = True) -> onnx.ModelProto:
        """The prepared model as runtimes want it: initializers no longer listed as inputs but for
        :attr:`weights_as_inputs` (unless not ``weight_inputs``), which onnxruntime then optimizes and runs as
        it does the file, and the inputs as the file declares them if :attr:`unsized`."""
        graph = self.model.graph
        kept = set(self.inputs) | (self.weights_as_inputs if weight_inputs else set())
        real_inputs = [value for value in graph.input if value.name in kept]
        graph.ClearField("input")
        graph.input.extend(real_inputs)
        if self.unsized:
            _declare_inputs(graph, self.declared_inputs)
        self.model.ir_version = max(self.model.ir_version, MIN_IR_VERSION)
        return self.model

    def on_runtime(self, use: Callable[[onnx.ModelProto], _Result]) -> _Result:
        """``use(model)`` on the runnable model; again on it unsized if onnxruntime refuses it sized.

        onnxruntime infers the shapes inside If and Loop bodies when it loads a model, the branches not
        taken included: a branch written for other sizes (silero-vad squeezes the batch axis only where it
        is 1) fails there at concrete sizes, though onnxruntime runs the file, whose sizes are symbolic.
        """
        try:
            return use(self.runnable_model())
        except RuntimeRefusal:
            if not self.accept_declared_sizes():
                raise
        return use(self.runnable_model())

    def loaded(self, model: onnx.ModelProto) -> onnx.ModelProto:
        """``model`` once onnxruntime has loaded it (for :meth:`on_runtime`); raises :class:`RuntimeRefusal`."""
        refusal = load_refusal(model, self.data_dir)
        if refusal is not None:
            raise RuntimeRefusal(self.path, f"onnxruntime cannot load the model: {refusal}")
        return model

    def derived(self, model: onnx.ModelProto, data_dir: Path, *, runtime_graph: bool = False) -> _ModelLoader:
        """A prepared loader of ``model``, made from this one's runnable model (optimized or converted):
        its inputs take this one's sizes, and the symbolic dimensions this one's file declares for them."""
        sizes = {
            f"{name}[{axis}]": size
            for name in self.inputs
            if name in self.specs
            for axis, size in enumerate(self.specs[name].shape)
        }
        result = _ModelLoader(
            self.path, model, sizes, data_dir, self.sample, sample_matched=True, runtime_graph=runtime_graph
        )
        result.declared_inputs = {
            value.name: _with_dims_of(value, self.declared_inputs[value.name])
            for value in model.graph.input
            if value.name in self.declared_inputs
        }
        result.unsized = self.unsized
        result.prepare()
        result.guessed, result.dim_names = self.guessed, self.dim_names
        return result

    def load(self, reach: int = 1) -> ModelGraph:
        nodes = list(self.model.graph.node)
        weights, constant_nodes = self._fold_constants(nodes)
        layers = self._live([node for index, node in enumerate(nodes) if index not in constant_nodes])
        if not layers:
            raise ModelError(self.path, "the model has no layers: all its nodes compute constants")
        specs = self.specs
        needed = self._values_layers_touch(layers)
        missing = [name for name in needed if name not in specs]
        slots = steering_slot_values(layers)
        near = self._near_data_dependent(layers, reach, weights)

        def steers(name: str, spec: TensorSpec) -> bool:
            return spec.steers(constant=name in weights) or name in slots

        def keeps(name: str, spec: TensorSpec) -> bool:
            return steers(name, spec) or name in near

        keep = {name for name in needed if name in specs and keeps(name, specs[name])}
        feeds = self.feeds()
        kept = {name: feeds[name] for name in self.inputs if name in keep}
        kept.update(self._read_constant_values([n for n in keep if n in weights]))
        to_run = missing + [n for n in keep if n not in kept]
        if to_run:
            # A value shape inference could not tell is kept by what the run shows it to be: with symbolic
            # sizes, the sizes a Shape computes (and Range, Reshape, Expand read) are among them.
            specs, kept = self._reference_run(to_run, specs, kept, feeds, keeps)
        activations = {name for name in kept if name in near and not steers(name, specs[name])}
        # Values still without a spec are not tensors (sequences, optionals): a brick may hold them
        # inside, never at its boundary (see bricks.describe_brick).
        return ModelGraph(
            path=self.path,
            opset_imports=self._opset_imports(),
            ir_version=self.model.ir_version,
            functions=list(self.model.functions),
            layers=layers,
            unsized=self.unsized,
            non_tensor_outputs={
                value.name: value.type for value in self.model.graph.output if not value.type.HasField("tensor_type")
            },
            specs={name: specs[name] for name in needed if name in specs},
            weights=frozenset(weights & set(needed)),
            kept_values=kept,
            inputs=self.inputs,
            outputs=self.outputs,
            weights_as_inputs=frozenset(self.weights_as_inputs & set(needed)),
            guessed_dims=self.guessed,
            dim_names=self.dim_names,
            activations=frozenset(activations),
            data_dependent=tuple(sorted(set().union(*(data_dependent_ops(layer) for layer in layers)))),
        )

    def _near_data_dependent(self, layers: list[onnx.NodeProto], reach: int, weights: set[str]) -> set[str]:
        """Activations read by layers less than ``reach`` layers from one whose work depends on its data:
        a brick holding that layer may read them, and its work depends on their values."""
        marked = [index for index, layer in enumerate(layers) if data_dependent_ops(layer) & DATA_DEPENDENT_OPS]
        near: set[str] = set()
        for index in marked:
            for layer in layers[max(0, index - reach + 1) : index + reach]:
                near.update(name for name in node_inputs(layer) if name not in weights)
        return near

    def _opset_imports(self) -> dict[str, int]:
        return {o.domain or "": o.version for o in self.model.opset_import}

    def _check_structure(self) -> None:
        """onnx's checker, as a helper: a model it rejects is used all the same when onnxruntime loads it.

        Never run on onnxruntime's own graph, whose fused operators may sit in the default domain
        (SimplifiedLayerNormalization), which the checker does not know.
        """
        if self.runtime_loads:
            return
        try:
            onnx.checker.check_model(self._structure())
        # onnx's checker raises its ValidationError, and on malformed input also the translations of
        # other C++ exceptions (ValueError, IndexError, RuntimeError...): all say the model is invalid.
        except Exception as error:
            self._require_runtime_loads(error)

    def _require_runtime_loads(self, error: Exception) -> None:
        """Accept what onnx's tools reject (``error``) if onnxruntime loads the model; else onnxruntime's reason."""
        if self.runtime_loads:
            return
        refusal = load_refusal(self.declared_model() if self.unsized else self.model, self.data_dir)
        if refusal is not None and not self.accept_declared_sizes():
            raise ModelError(self.path, f"onnxruntime cannot load the model: {refusal}") from error
        self.runtime_loads = True

    def accept_declared_sizes(self) -> bool:
        """Whether onnxruntime loads the model with its inputs as the file declares them (asked where it
        refuses the model sized, or to run it as the file runs); if so, it is given them from now on
        (:attr:`unsized`)."""
        if self.unsized or not self.declared_inputs:
            return False
        self.unsized = load_refusal(self.declared_model(), self.data_dir) is None
        return self.unsized

    def declared_model(self) -> onnx.ModelProto:
        """A copy of the model with its inputs as the file declares them."""
        model = onnx.ModelProto()
        model.CopyFrom(self.model)
        _declare_inputs(model.graph, self.declared_inputs)
        return model

    def _structure(self, keep_data: Callable[[TensorSpec], bool] = lambda spec: False) -> onnx.ModelProto:
        """The model with its initializers declared as inputs and no weight data, but for those ``keep_data``
        accepts: what the checker and shape inference need.

        They then neither copy large weights (onnx hands them to C++ serialized, and shape inference
        back) nor resolve external data against the working directory; weight data is read, relative
        to the model's folder, only where a value is needed.
        """
        skeleton = onnx.ModelProto(ir_version=self.model.ir_version)
        skeleton.opset_import.extend(self.model.opset_import)
        skeleton.functions.extend(self.model.functions)
        graph = self.model.graph
        skeleton.graph.name = graph.name
        skeleton.graph.node.extend(graph.node)
        skeleton.graph.input.extend(graph.input)
        skeleton.graph.output.extend(graph.output)
        skeleton.graph.value_info.extend(graph.value_info)
        kept = [tensor for tensor in graph.initializer if keep_data(TensorSpec(tensor.data_type, tuple(tensor.dims)))]
        kept += [self._dense(name) for name, spec in self._sparse_specs().items() if keep_data(spec)]
        skeleton.graph.initializer.extend(kept)
        declared = {value.name for value in graph.input} | {tensor.name for tensor in kept}
        weights = {tensor.name: TensorSpec(tensor.data_type, tuple(tensor.dims)) for tensor in graph.initializer}
        weights.update(self._sparse_specs())
        skeleton.graph.input.extend(
            onnx.helper.make_tensor_value_info(name, spec.dtype, list(spec.shape))
            for name, spec in weights.items()
            if name not in declared
        )
        return skeleton

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

    def _infer_specs(self) -> dict[str, TensorSpec]:
        """Specs shape inference gives; only the declared ones where it fails on a model onnxruntime loads
        (the reference run then learns the rest)."""
        try:
            graph = shape_inference.infer_shapes(self._structure(_may_decide_shapes), data_prop=True).graph
        except Exception as error:  # as for the checker: InferenceError, or a translated C++ exception
            self._require_runtime_loads(error)
            return self._declared_specs()
        specs: dict[str, TensorSpec] = {}
        for value in [*graph.input, *graph.value_info, *graph.output]:
            spec = _spec_of(value.type)
            if spec is not None:
                specs[value.name] = spec
        for tensor in self.initializers.values():
            specs[tensor.name] = TensorSpec(tensor.data_type, tuple(tensor.dims))
        specs.update(self._sparse_specs())
        return specs

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

    def _reference_run(
        self,
        names: list[str],
        specs: dict[str, TensorSpec],
        kept: dict[str, np.ndarray],
        feeds: dict[str, np.ndarray],
        keeps: Callable[[str, TensorSpec], bool],
    ) -> tuple[dict[str, TensorSpec], dict[str, np.ndarray]]:
        """Run the model once on its inputs to learn what shape inference could not tell, and the values
        ``keeps`` accepts by name and spec (float activations only up to :data:`MAX_KEPT_INTEGER_ELEMENTS`
        elements)."""
        results = self.on_runtime(
            lambda model: run_reference(self.path, model, self.data_dir, names, feeds, optimized=self.runtime_graph)
        )
        specs = dict(specs)
        kept = dict(kept)
        for name, array in results.items():
            spec = TensorSpec(onnx.helper.np_dtype_to_tensor_dtype(array.dtype), tuple(array.shape))
            specs[name] = spec
            if (
                keeps(name, spec)
                and name not in self.inputs
                and (not spec.is_float or spec.numel <= MAX_KEPT_INTEGER_ELEMENTS)
            ):
                kept[name] = array
        return specs, kept


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


def _may_decide_shapes(spec: TensorSpec) -> bool:
    """Whether shape inference may need the weight's values: integers (shapes, axes) and small floats (scales)."""
    return spec.steers(constant=True) or (spec.is_float and spec.numel <= MAX_INFERENCE_FLOAT_ELEMENTS)


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
