"""Brick runners: a brick built, checked against the model and ready to be timed, one inference per call."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import onnx

from ..core.errors import describe_error
from ..core.graph import VIEW_OPS
from ..core.placement import Placement, placement_of
from ..core.runtime import (
    RunStopped,
    bind,
    create_session,
    declared_shapes_hold,
    input_rewriter,
    profile,
    rebind_outputs,
    run_watched,
)
from ..core.settings import DEFAULT_PROVIDERS, Settings
from ..core.synthetic import SharedWeights, SynthesisError
from ..cut.bricks import BrickSpec
from .caches import ColdInputs
from .synthesis import brick_feeds, brick_model_and_weights, build_brick_model


class BrickRunner:
    """A brick ready to time: its session and feeds are made once, each call is one inference.

    When the providers are not the default or the brick holds float16 tensors, :meth:`check` also
    runs the brick once in a profiled session of its own, to learn which provider ran each node
    (:attr:`placement`) and whether onnxruntime ran float16 operators in float32.

    ``optimized`` marks a brick cut from the graph onnxruntime optimized for ``settings``: onnxruntime
    runs it as it is, without optimizing it again. ``shared`` gives the synthetic weights of a run's
    bricks (see :class:`~.synthetic.SharedWeights`). ``flush``, for a brick that waits on reading its
    weights, pushes them out of the caches as the rest of its model does (see :mod:`.caches`). ``cold``
    gives the inputs the model wrote long before the brick reads them: each call takes the next of as many
    copies of them as push the others as far out of the caches (see :func:`.caches.input_copies`). ``before`` is
    the brick its model runs right before it, called before each of its calls (see :mod:`.neighbours`).
    """

    def __init__(
        self,
        brick: BrickSpec,
        settings: Settings,
        *,
        parallel: bool = False,
        optimized: bool = False,
        shared: SharedWeights | None = None,
        flush: Callable[[], None] | None = None,
        cold: ColdInputs | None = None,
        before: BrickRunner | None = None,
    ) -> None:
        self.brick = brick
        self.flush = flush
        self.before = before
        #: The cold inputs its calls take copies of; None when it has none, or cannot take copies.
        self.cold: ColdInputs | None = None
        try:
            feeds = brick_feeds(brick)
            model, weights = brick_model_and_weights(brick, shared)
        except SynthesisError as error:
            raise BrickError(str(error)) from error
        views = view_outputs(brick, feeds)
        self._open(model, feeds, settings, parallel, views=views, what="brick", optimized=optimized, weights=weights)
        if cold is not None:
            self._copy_cold_inputs(cold, views)

    def _open(
        self,
        model: onnx.ModelProto | Path,
        feeds: dict[str, np.ndarray],
        settings: Settings,
        parallel: bool,
        *,
        views: Mapping[str, np.ndarray],
        what: str,
        data_dir: Path | None = None,
        optimized: bool = False,
        weights: Mapping[str, np.ndarray] | None = None,
    ) -> None:
        self.settings = settings
        self.parallel = parallel
        self.optimized = optimized
        self.feeds = feeds
        self.placement: Placement | None = None
        self._rewrites: list[Callable[[], object]] | None = None
        try:
            self.session = create_session(
                model, settings, data_dir, parallel=parallel, optimized=optimized, initializers=weights
            )
        except Exception as error:  # onnxruntime's exception types are not part of its API
            if type(error).__name__ == "NotImplemented":
                providers = "+".join(settings.providers)
                raise UnsupportedByProvider(f"{providers} cannot run it: {describe_error(error)}") from error
            raise BrickError(f"onnxruntime cannot load the {what}: {describe_error(error)}") from error
        self.provider = self.session.get_providers()[0]
        self._binding = bind(self.session, self.feeds, views)
        #: The bindings calls take in turn: one, but for a brick given cold inputs.
        self._bindings = [self._binding] if self._binding is not None else []
        self._turn = 0
        #: The inputs written again before each call: all, but for the cold ones.
        self._hot = list(self.feeds.values())
        self._rebind = False
        self._outputs: list[np.ndarray] = []
        self._called = False

    def _copy_cold_inputs(self, cold: ColdInputs, views: Mapping[str, np.ndarray]) -> None:
        """Bind each further copy of the cold inputs, with outputs of its own, as a layer writes its output into
        memory the model last used long before: Inception-v2's Concats with such inputs took 285 us with outputs
        of their own and 209 us sharing one (in turn, in one process; the model's 10 Concats took 360 us), which
        held less memory (a validation of it and DenseNet-121, 1.06 GB at most instead of 1.23 GB; 0.98 GB
        without copies). Not for a brick run without a binding, nor one whose outputs are views of its inputs
        (a reshape, which reads nothing)."""
        names = [self.brick.inputs[position][0] for position in cold.positions]
        if self._binding is None or views:
            return
        for _ in range(cold.copies - 1):
            feeds = {name: array.copy() if name in names else array for name, array in self.feeds.items()}
            binding = bind(self.session, feeds)
            if binding is not None:
                self._bindings.append(binding)
        self._hot = [array for name, array in self.feeds.items() if name not in names]
        self.cold = cold

    def __call__(self) -> None:
        """One inference, its outputs left where onnxruntime put them (see :func:`bind`)."""
        self._called = True
        if self._binding is None:
            self._outputs = self.session.run(None, self.feeds)
            return
        if self._rebind:
            rebind_outputs(self.session, self._binding)
        self.session.run_with_iobinding(self._binding)

    def outputs(self) -> list[np.ndarray]:
        """The outputs of the last call; none before the first (a binding copied before any run crashes onnxruntime)."""
        if not self._called:
            return []
        return self._outputs if self._binding is None else list(self._binding.copy_outputs_to_cpu())

    def prepare_call(self) -> None:
        """Leave the caches as the model leaves them for the brick; not part of the brick's time.

        Inside the model, the layer before a brick has just written its inputs on the thread pool,
        so they sit in the caches of the cores that wrote them. Called again and again on the same
        inputs, a brick would find them in its own core's cache instead, and run faster than it
        does in the model (see docs/method.rst, *Bricks timed as they run in the model*). So the
        inputs are written again, in place, on onnxruntime's threads; for a brick given ``flush``,
        after its weights were pushed out of the caches (see :mod:`.caches`), and for one given ``before``,
        after a call of the brick before it (see :mod:`.neighbours`), as the model runs it before. Cold inputs
        are not written: the call takes the copy the longest unread.
        """
        if self.flush is not None:
            self.flush()
        if self.before is not None:
            self.before.run_before()
        self._write_inputs()

    def run_before(self) -> None:
        """Run as the brick before another (see :mod:`.neighbours`): its inputs written again, as the brick before
        it writes them in the model, then one call; its own ``flush`` and ``before`` are the other brick's to
        leave out."""
        self._write_inputs()
        self()

    def _write_inputs(self) -> None:
        if len(self._bindings) > 1:
            self._turn = (self._turn + 1) % len(self._bindings)
            self._binding = self._bindings[self._turn]
        if self._rewrites is None:
            self._rewrites = [input_rewriter(array) for array in self._hot if _rewritable(array)]
        for rewrite in self._rewrites:
            rewrite()

    def check(self) -> None:
        """Run once and check the outputs have the shapes they have inside the model, and where it ran."""
        results = self._first_run("brick")
        for (name, spec), result in zip(self.brick.outputs, results):
            if tuple(result.shape) != spec.shape:
                raise BrickError(
                    f"output {name} has shape {list(result.shape)} but {list(spec.shape)} inside the model;"
                    " timing it would measure different work"
                )
        if _profiled(self.brick, self.settings):
            self.placement = self._profiled_run()
            self.provider = self.placement.provider or self.provider
            fallback = self.placement.float16_fallback()
            if fallback is not None:
                raise UnsupportedByProvider(fallback)

    def _first_run(self, what: str) -> list[np.ndarray]:
        try:
            results = run_watched(self.session, None, self.feeds)
        except RunStopped as error:
            raise BrickError(f"the {what} never finished: {error}") from error
        except Exception as error:  # onnxruntime's exception types are not part of its API
            raise BrickError(f"onnxruntime cannot run the {what}: {describe_error(error)}") from error
        self._rebind = self._binding is not None and not declared_shapes_hold(self.session, results)
        return results

    def _profiled_run(self) -> Placement:
        events = profile(
            build_brick_model(self.brick), self.settings, self.feeds, parallel=self.parallel, optimized=self.optimized
        )
        return placement_of(events)


class ModelRunner(BrickRunner):
    """A whole model ready to time against its bricks: the user's file as onnxruntime loads it, with its
    real weights (or the model converted to the point's numeric type), on the inputs the bricks were cut
    for. Its outputs are its own: never bound onto its inputs (see :func:`view_outputs`)."""

    def __init__(
        self,
        model: onnx.ModelProto | Path,
        feeds: dict[str, np.ndarray],
        settings: Settings,
        *,
        data_dir: Path | None = None,
        parallel: bool = False,
    ) -> None:
        self.flush = None
        self.cold = None
        self.before = None
        self._open(model, feeds, settings, parallel, views={}, what="model", data_dir=data_dir)

    def check(self) -> None:
        """Run once: the model runs on these inputs, within the time and memory limits."""
        self._first_run("model")


def view_outputs(brick: BrickSpec, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The brick's outputs that only reshape one of its inputs, each as a view of that input's array.

    Inside a model, onnxruntime gives the output of Reshape, Squeeze, Flatten and the like the memory
    of their input: they copy nothing. Left to onnxruntime's allocator, a brick's such output would
    be a copy, several times the layer's cost (5.9 us instead of 2.2 us for a 180 KB Reshape).
    Bound onto the input's memory, onnxruntime sees the same buffer and copies nothing, as inside
    the model. A view whose input is computed inside the brick cannot be bound so, and stays a copy.
    """
    shapes = dict(brick.outputs)
    views = {}
    for node in brick.nodes:
        source = feeds.get(node.input[0]) if _only_reshapes(node) else None
        target = shapes.get(node.output[0])
        if source is not None and target is not None and source.flags.c_contiguous:
            views[node.output[0]] = source.reshape(target.shape)
    return views


def _only_reshapes(node: onnx.NodeProto) -> bool:
    """A Dropout given ``training_mode`` may drop values: a computation, not a view."""
    return node.op_type in VIEW_OPS and bool(node.input) and not (node.op_type == "Dropout" and len(node.input) > 2)


#: Types onnxruntime's CPU Add kernel takes, the operator that rewrites inputs.
_ADDABLE = frozenset(np.dtype(name) for name in ("float32", "float64", "float16", "int32", "int64"))


def _rewritable(array: np.ndarray) -> bool:
    return array.dtype in _ADDABLE and array.size > 0 and array.flags.c_contiguous


_REDUCED_FLOATS = frozenset({onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16})


def _profiled(brick: BrickSpec, settings: Settings) -> bool:
    """Whether a brick's first run is profiled: other providers than the default, or float16 tensors."""
    specs = (*brick.inputs, *brick.weights, *brick.outputs)
    return settings.providers != DEFAULT_PROVIDERS or any(spec.dtype in _REDUCED_FLOATS for _, spec in specs)


class BrickError(Exception):
    """A brick cannot be built or run by onnxruntime."""


class UnsupportedByProvider(BrickError):
    """The providers cannot run the brick at its types: no kernel, or float16 run in float32 between casts."""
