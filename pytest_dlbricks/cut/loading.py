"""Load an ONNX model into the view the cutter needs: compute layers in order, value specs, weights.

Weights are everything a model can compute without its inputs (initializers, Constant nodes and
constant subgraphs such as old exporters' ConstantOfShape weights); they are not layers. Values
that steer computation (integer, boolean and string tensors, tiny tensors, and whatever feeds a
shape, size or scale slot such as Resize's scales) keep their real values, so that every brick does
the same work as inside the model; so do the activations read near an operator whose work depends
on its data (If, NonZero, ...), as the reference run computed them. Quantized weights and
activations, and the sums of their products, are integers that steer nothing: they are synthesized, as
float ones are. Inputs are the user's sample inputs where given (see :mod:`.samples`), else synthetic;
the reference run runs on them. Their sizes are written into the model onnxruntime is given, unless it
refuses them there (see :meth:`_ModelLoader.on_runtime`) or runs more nodes without them (see
:func:`_declared_if_it_runs_more`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

import numpy as np
import onnx
from onnx import shape_inference

from ..core.errors import ModelError, RuntimeRefusal, describe_error, dims_hint
from ..core.graph import (
    DATA_DEPENDENT_OPS,
    MAX_KEPT_INTEGER_ELEMENTS,
    MIN_IR_VERSION,
    ModelGraph,
    TensorSpec,
    data_dependent_ops,
    nested_tensors,
    node_inputs,
    quantized_accumulators,
    steering_slot_values,
)
from ..core.runtime import load_refusal, optimize_model, run_reference
from ..core.settings import DEFAULT_DIM, Settings
from ..core.synthetic import model_feeds
from .model_parts import ModelParts, _declare_inputs, _spec_of, _with_dims_of
from .samples import SampleInputs, match_inputs
from .screening import (
    check_model_file,
    check_packed_weights,
    check_runtime_accepts,
    check_text,
    check_values,
    check_weights,
)

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


class _ModelLoader(ModelParts):
    """One load of one model; split into steps so each stays short."""

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
        result.guessed, result.dim_names, result.sampled = self.guessed, self.dim_names, self.sampled
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
        accumulators = quantized_accumulators(layers)
        near = self._near_data_dependent(layers, reach, weights)

        def steers(name: str, spec: TensorSpec) -> bool:
            return name in slots or (spec.steers(constant=name in weights) and name not in accumulators)

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
            sampled_dims=self.sampled,
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
            raise RuntimeRefusal(self.path, f"onnxruntime cannot load the model: {refusal}") from error
        self.runtime_loads = True

    def accept_declared_sizes(self) -> bool:
        """Whether onnxruntime loads the model with its inputs as the file declares them (asked where it
        refuses the model sized, or to run it as the file runs); if so, it is given them from now on
        (:attr:`unsized`)."""
        if self.unsized or not self.declared_inputs:
            return False
        self.unsized = load_refusal(self.declared_model(), self.data_dir) is None
        return self.unsized

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


def _may_decide_shapes(spec: TensorSpec) -> bool:
    """Whether shape inference may need the weight's values: integers (shapes, axes) and small floats (scales)."""
    return spec.steers(constant=True) or (spec.is_float and spec.numel <= MAX_INFERENCE_FLOAT_ELEMENTS)
