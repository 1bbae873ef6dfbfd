"""What an inference call costs beyond its layers' work, and its measurement on this machine.

Every brick is timed as a model of its own and pays that cost once; composition takes it off each
brick and counts it once for the whole model. A brick is also timed through its item's loop (the
run's clock paused around the rewriting of its inputs), which costs each of its calls a little more
than the model's one timed call pays: that part too is taken off every brick, and never counted for
the model.

**At the brick's moment.** On a machine whose speed moves (a shared or virtual one; on a 2-core VM the
fixed cost read 3.8 us and 7 us in turn, for stretches of tenths of a second), a brick timed in a fast
stretch paid half the call cost measured in a slow one: taking the measured cost off every brick of a
transformer block, all of microseconds, left 11 us of a model of 56 us, and 240 us of one of 135 us
in another run. So the run also times a reference call right before and after each brick (see
:meth:`.speed_trace.SpeedTrace.now`), and the call cost taken off that brick is the measured one in
the proportion of the reference's time then to its time when the costs were measured.
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import onnx

from ..core.clock import PausableClock, time_calls
from ..core.graph import MIN_IR_VERSION
from ..core.runtime import bind, create_session, input_rewriter
from ..core.settings import Settings

#: How :func:`measure_call_overhead` measures; a record of another method is measured again. 2: the fixed
#: cost is read from chains without a Sum ahead of them (method 1 counted that Sum in it). 3: what timing a
#: brick adds is read from the median of calls timed as rounds of one, as pytest-benchmark times a brick, not
#: from their mean (method 2 counted the slow calls a mean holds in it). Records written before the reference
#: call was timed beside the costs lack :attr:`CallOverhead.reference_s`.
MEASUREMENT_METHOD = 3


@dataclass(frozen=True)
class CallOverhead:
    """What one inference call costs beyond its layers' work, in seconds, on this machine.

    Every brick was timed as a model of its own and paid it once; the whole model pays it once.
    A call with more inputs or outputs costs more, so the cost is fixed plus a part per extra one.
    """

    fixed_s: float = 0.0
    per_input_s: float = 0.0
    per_output_s: float = 0.0
    #: The fixed cost of a call under onnxruntime's parallel executor, measured beside the others in
    #: every run: the parallel estimate pays it instead of ``fixed_s``. The critical path never does:
    #: it is a lower bound, for an executor with unlimited parallelism. None in records of runs that
    #: did not measure it.
    parallel_fixed_s: float | None = None
    #: What each layer costs more under the parallel executor than under the sequential one (it hands every
    #: node to its inter-op threads): counted for every layer of the parallel estimate. None in records of
    #: runs that did not measure it, which count nothing for it.
    parallel_layer_s: float | None = None
    #: What timing a brick through its item adds to each of its calls beyond the model's one timed call
    #: (the loop, the clock paused around the rewriting of its inputs): taken off every brick only.
    timing_s: float = 0.0
    #: The reference call's time (:data:`REFERENCE`, median of calls timed alone) measured beside these
    #: costs: a brick timed while the reference took longer or shorter paid its call cost in that
    #: proportion (see :meth:`of_brick`). None in records of runs that did not measure it.
    reference_s: float | None = None

    @property
    def trivial_layer_s(self) -> float | None:
        """What running one trivial layer costs beyond the call: the reference chain's time less the fixed
        cost, per layer of it; None where the reference was not measured or reads no more than the call."""
        if not self.reference_s or self.reference_s <= self.fixed_s:
            return None
        return (self.reference_s - self.fixed_s) / REFERENCE_SIZE

    def of(self, inputs: int, outputs: int, *, parallel: bool = False) -> float:
        """The cost of a call with these many inputs and outputs (``parallel``: under the parallel
        executor, whose fixed cost must have been measured)."""
        fixed = self.parallel_fixed_s if parallel else self.fixed_s
        assert fixed is not None, "the parallel executor's call cost was not measured"
        return fixed + self.per_input_s * max(inputs - 1, 0) + self.per_output_s * max(outputs - 1, 0)

    def of_brick(self, inputs: int, outputs: int, reference_s: float | None = None) -> float:
        """What a brick's timed call costs beyond its layers' work; ``reference_s``: the reference call's
        time around the brick's timing, when known (see :meth:`at`)."""
        at = self.at(reference_s)
        return at.of(inputs, outputs) + at.timing_s

    def at(self, reference_s: float | None) -> CallOverhead:
        """The costs at the speed the reference call's time ``reference_s`` shows, in proportion to its
        time beside these costs' measurement (see the module's description); these costs where either
        is unknown (or reads no time at all)."""
        if reference_s is None or reference_s <= 0 or not self.reference_s:
            return self
        scale = reference_s / self.reference_s
        parallel, parallel_layer = self.parallel_fixed_s, self.parallel_layer_s
        return replace(
            self,
            fixed_s=self.fixed_s * scale,
            per_input_s=self.per_input_s * scale,
            per_output_s=self.per_output_s * scale,
            parallel_fixed_s=None if parallel is None else parallel * scale,
            parallel_layer_s=None if parallel_layer is None else parallel_layer * scale,
            timing_s=self.timing_s * scale,
            reference_s=reference_s,
        )


NO_OVERHEAD = CallOverhead()


def measure_call_overhead(settings: Settings, rounds: int = 11, calls: int = 100) -> CallOverhead:
    """What an inference call costs beyond its layers, as intercepts and slopes of tiny models' times.

    Chains of 1 to 16 trivial layers give the fixed cost (the time a chain of no layers would take;
    a one-layer model's time would also remove the per-layer cost the whole model pays, and
    over-correct), each call timed alone as the whole model's is; the same chains timed as brick
    items time bricks give what timing a brick adds; one layer reading 1 to 8 inputs, and 1 to 8
    layers each writing an output, give the cost of each further input and output. All are timed
    interleaved, back to back, so the machine's noise hits them alike. The reference call is the
    longest chain: its time is read in the proportion of the fixed cost to it within each round (a round
    takes milliseconds, the machine's speed states tenths of a second; the medians over rounds of two
    chains can fall in different states). The parallel executor's fixed cost is measured apart, and
    only for a parallel estimate (see :func:`measure_parallel_costs`).
    """
    chains = [_Call(_tiny_model(size, 1, 1), settings) for size in _SIZES]
    families = {
        "chain": chains,
        "timed": chains,
        "inputs": [_Call(_tiny_model(1, size, 1, summed=True), settings) for size in _SIZES[:4]],
        "outputs": [_Call(_tiny_model(size, 1, size), settings) for size in _SIZES[:4]],
    }
    times = _interleaved_times(families, rounds, calls)
    medians = {name: [float(np.median(member)) for member in group] for name, group in times.items()}
    layer_s, fixed_s = np.polyfit(_SIZES, medians["chain"], 1)
    _, timed_fixed_s = np.polyfit(_SIZES, medians["timed"], 1)
    per_input_s, _ = np.polyfit(_SIZES[:4], medians["inputs"], 1)
    per_output_s, _ = np.polyfit(_SIZES[:4], medians["outputs"], 1)
    return CallOverhead(
        fixed_s=max(float(fixed_s), 0.0),
        per_input_s=max(float(per_input_s), 0.0),
        per_output_s=max(float(per_output_s - layer_s), 0.0),
        timing_s=max(float(timed_fixed_s - fixed_s), 0.0),
        reference_s=_reference_beside(max(float(fixed_s), 0.0), times["chain"]),
    )


def _reference_beside(fixed_s: float, chains: list[list[float]]) -> float | None:
    """The reference call's time at the speed ``fixed_s`` was measured at: ``fixed_s`` over the median of
    the rounds' fixed cost to reference ratios (``chains``: each chain's time by round); None when the
    fixed cost is nothing, to which no speed is in proportion."""
    by_round = np.array(chains)
    fixed_by_round = np.polyfit(_SIZES, by_round, 1)[1]
    ratio = float(np.median(fixed_by_round / by_round[_SIZES.index(REFERENCE_SIZE)]))
    return fixed_s / ratio if fixed_s > 0 and ratio > 0 else None


#: A parallel executor's call measured at more than this many times the sequential one's, plus
#: :data:`PARALLEL_MARGIN_S`, was caught in a slow state: on a 2-core machine its sessions read 1 to 2 times
#: the sequential call cost, or milliseconds (a session landing in the slow state, the cores taken by others).
PARALLEL_FACTOR = 10
PARALLEL_MARGIN_S = 20e-6
#: Likewise for what a layer costs it beyond the sequential executor's layer: a set of sessions caught slow
#: read 0.78 ms a layer, with an intercept under the bound above.
PARALLEL_LAYER_MARGIN_S = 2e-6
#: Sets of fresh sessions the parallel executor's call cost may be read from, and how many must read a
#: sane cost before the lower median of theirs is kept.
PARALLEL_SETS = 3
PARALLEL_AGREEING = 2
#: Calls of each session in a set's first round, which decides whether the set is timed in full: few, as a
#: set caught slow takes milliseconds a call (on a loaded 2-core machine, a set of 20-call rounds took seconds).
PARALLEL_FIRST_CALLS = 5


def parallel_ceiling(sequential: CallOverhead) -> float:
    """The most a call of the parallel executor can sanely cost beside the sequential executor's ``sequential``."""
    return PARALLEL_FACTOR * sequential.fixed_s + PARALLEL_MARGIN_S


@dataclass(frozen=True)
class ParallelCosts:
    """What the parallel executor costs beyond the sequential one: its fixed cost of a call, and what each layer
    costs more (see :attr:`CallOverhead.parallel_layer_s`)."""

    fixed_s: float
    layer_s: float


def measure_parallel_costs(
    settings: Settings, sequential: CallOverhead, rounds: int = 5, calls: int = 20
) -> ParallelCosts | None:
    """The fixed cost of a call under the parallel executor, as the intercept of chains' calls timed alone, and
    what each layer costs it more than the sequential executor, as the difference of the two executors' slopes
    over the same chains timed in turn; None when every set of sessions was caught in a slow state.

    Fewer calls than for the sequential costs: where the executor's threads compete with the intra-op
    ones for the cores, one of its calls can take milliseconds. Each chain has a session of its own, and
    a session of this executor may land in a slow state (8 ms a call where others take 10 us), so the line
    is fitted robustly (the median of the pairwise slopes, then of the intercepts), which passes over one or
    two slow sessions of the five: fitted by least squares, four identical runs read 6.3 ms, 3.6 us, 6.8 us
    and 3.6 us. Whole sets of sessions were caught too (three fresh runs in seven read 8 ms, and a 10 us
    model then read 14 ms), so the chains are timed in fresh sets of sessions, one round first: a set whose
    intercept passes :func:`parallel_ceiling`, or whose cost per layer passes :data:`PARALLEL_FACTOR` times the
    sequential executor's plus :data:`PARALLEL_LAYER_MARGIN_S`, is dropped, and the lower median of the first
    :data:`PARALLEL_AGREEING` sets within them is kept (a slow state only ever adds time).

    Each layer of such a chain took 0.35 to 0.67 us under the parallel executor and 0.24 to 0.27 us under the
    sequential one (2 cores, from one hour to the next): where a model's layers take microseconds, that
    difference is most of what the parallel executor adds (the sample transformer block, 33 layers in 50 us,
    took 1.21 to 1.26 times its sequential time under it, where its call cost alone adds 1 us).
    """
    ceiling = parallel_ceiling(sequential)
    kept: list[ParallelCosts] = []
    for _ in range(PARALLEL_SETS):
        sessions = {
            "sequential": [_Call(_tiny_model(size, 1, 1), settings) for size in _SIZES],
            "parallel": [_Call(_tiny_model(size, 1, 1), settings, parallel=True) for size in _SIZES],
        }
        first = _parallel_intercept(_interleaved_times(sessions, 1, min(calls, PARALLEL_FIRST_CALLS))["parallel"])
        if first > ceiling:
            continue
        times = _interleaved_times(sessions, rounds, calls)
        parallel_layer_s, intercept = _chain_line(times["parallel"])
        sequential_layer_s, _ = _chain_line(times["sequential"])
        fitted = max(intercept, 0.0)
        layer_s = max(parallel_layer_s - sequential_layer_s, 0.0)
        if fitted <= ceiling and layer_s <= PARALLEL_FACTOR * max(sequential_layer_s, 0.0) + PARALLEL_LAYER_MARGIN_S:
            kept.append(ParallelCosts(fixed_s=fitted, layer_s=layer_s))
        if len(kept) == PARALLEL_AGREEING:
            break
    if not kept:
        return None
    return ParallelCosts(
        fixed_s=statistics.median_low(costs.fixed_s for costs in kept),
        layer_s=statistics.median_low(costs.layer_s for costs in kept),
    )


def _parallel_intercept(times: list[list[float]]) -> float:
    """The intercept of the chains' median times, never below zero."""
    return max(_chain_line(times)[1], 0.0)


def _chain_line(times: list[list[float]]) -> tuple[float, float]:
    """The slope (seconds per layer) and intercept of the chains' median times (see :func:`_robust_line`)."""
    return _robust_line(_SIZES, [float(np.median(member)) for member in times])


def _robust_line(sizes: Sequence[int], seconds: Sequence[float]) -> tuple[float, float]:
    """The slope and intercept of the line through (size, seconds) that most points follow (Theil and Sen's)."""
    pairs = itertools.combinations(zip(sizes, seconds), 2)
    slope = float(np.median([(b_s - a_s) / (b - a) for (a, a_s), (b, b_s) in pairs]))
    return slope, float(np.median([time - slope * size for size, time in zip(sizes, seconds)]))


_SIZES = (1, 2, 4, 8, 16)
#: The reference call of the run's speed trace (see :mod:`.speed_trace`): the longest of the chains the
#: call cost is read from.
REFERENCE_SIZE = _SIZES[-1]
REFERENCE = f"a chain of {REFERENCE_SIZE} one-element Adds"


def reference_call(settings: Settings) -> Callable[[], None]:
    """The reference call of the run's speed trace, its inputs and outputs bound as bricks' are."""
    return _Call(_tiny_model(REFERENCE_SIZE, 1, 1), settings)


class _Call:
    """One tiny model ready to call as bricks are called (see :func:`bind`), and its inputs' rewriters."""

    def __init__(self, model: onnx.ModelProto, settings: Settings, *, parallel: bool = False) -> None:
        self.session = create_session(model, settings, parallel=parallel)
        feeds = {value.name: np.ones(1, np.float32) for value in self.session.get_inputs()}
        binding = bind(self.session, feeds)
        assert binding is not None  # float inputs always bind
        self.binding = binding
        self.rewrites = [input_rewriter(array) for array in feeds.values()]

    def __call__(self) -> None:
        self.session.run_with_iobinding(self.binding)

    def rewrite_inputs(self) -> None:
        for rewrite in self.rewrites:
            rewrite()


def _interleaved_times(families: dict[str, list[_Call]], rounds: int, calls: int) -> dict[str, list[list[float]]]:
    """Time of a call of each model in each round (a median of ``calls``), the models taking turns round
    after round; the family ``timed`` is timed as brick items time bricks, the others one call at a time."""
    samples: dict[str, list[list[float]]] = {name: [[] for _ in group] for name, group in families.items()}
    for _ in range(rounds):
        for name, group in families.items():
            timing = _time_as_bricks if name == "timed" else _time_alone
            for call, times in zip(group, samples[name]):
                times.append(timing(call, calls))
    return samples


def _time_alone(call: _Call, calls: int) -> float:
    """Median seconds of a call timed alone, back to back, after one untimed call."""
    call()
    return float(np.median(time_calls(call, calls)))


def _time_as_bricks(call: _Call, calls: int) -> float:
    """Median seconds of a call timed as a brick item times its brick: each call a round of its own, as
    pytest-benchmark times a brick of microseconds (one iteration a round), first rewriting its inputs with the
    clock paused (see :mod:`.items` and :class:`.PausableClock`). The median, as of the bricks' rounds and of
    the calls timed alone it is set against: their mean holds the slow calls too (a chain of trivial layers:
    0.86 us over the calls alone where the median reads 0.38 us), and taken off every brick's median it made
    models of many small bricks read low (the zoo's scikit-learn models 0.22 to 0.70 of their time)."""
    clock = PausableClock(time.perf_counter)

    def timed() -> None:
        clock.untimed(call.rewrite_inputs)
        call()

    timed()
    times = []
    for _ in range(calls):
        start = clock()
        timed()
        times.append(clock() - start)
    return float(np.median(times))


def _tiny_model(layers: int, inputs: int, outputs: int, *, summed: bool = False) -> onnx.ModelProto:
    """One-element tensors: ``layers`` additions, the last ``outputs`` returned, after a Sum of the
    ``inputs`` when ``summed`` (one input otherwise). The chains the fixed cost is read from have no Sum:
    their intercept is then a call of no layer at all, where a Sum ahead of them would count its own
    cost (1.2 to 1.9 us on a 2-core machine, more than an Add) in the fixed cost taken off every brick."""
    helper = onnx.helper
    names = [f"x{i}" for i in range(inputs)] if summed else ["v0"]
    nodes = [helper.make_node("Sum", names, ["v0"])] if summed else []
    nodes += [helper.make_node("Add", [f"v{i}", f"v{i}"], [f"v{i + 1}"]) for i in range(layers)]
    returned = [f"v{i}" for i in range(layers + 1 - outputs, layers + 1)]
    graph = helper.make_graph(
        nodes,
        "calibration",
        [helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, [1]) for name in names],
        [helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, [1]) for name in returned],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = MIN_IR_VERSION
    return model
