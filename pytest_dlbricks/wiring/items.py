"""The bodies of the timed items: a distinct brick timed with pytest-benchmark, a whole model timed beside its bricks.

Each item builds its runner, checks it, and records what it measured in the run's engine
(:class:`~pytest_dlbricks.wiring.engine.DLBricksRun`); a brick or model that cannot run is skipped or
fails alone, with a message that names it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import pytest

from ..core.errors import ModelError, dims_hint
from ..core.settings import DEFAULT_DIM
from ..cut.cutting import ModelPlan
from ..estimating.validation import BrickRounds, Validation, rounds_for
from ..reporting.entries import BrickResult
from ..timing.neighbours import follows
from ..timing.running import BrickError, BrickRunner, UnsupportedByProvider
from .engine import DLBricksRun

#: pytest-benchmark statistics kept per brick: all its numbers, so that a brick reused from the store makes
#: the same entry in pytest-benchmark's history as when it was timed.
KEPT_STATS = (
    "min",
    "max",
    "mean",
    "median",
    "stddev",
    "iqr",
    "q1",
    "q3",
    "rounds",
    "ld15iqr",
    "hd15iqr",
    "iqr_outliers",
    "stddev_outliers",
    "ops",
    "total",
)
#: Confidence level of ``--dlbricks-precision``'s margin of error.
PRECISION_CONFIDENCE = 0.95
#: Seconds the timed rounds of a brick faster than :data:`SHORT_CALL_S` span at the least (within
#: pytest-benchmark's ``max_time``). Calls run for milliseconds at a time 1-2.5 us slower than usual (the
#: machine's state of the moment): a microsecond brick whose rounds stop after a millisecond can catch
#: one such stretch whole, and its median with it (the sample mlp read 1.0x to 1.9x its measured time).
#: Spread over more stretches, the median is the brick's usual time.
MIN_SPAN_S = 0.02
#: Calls at least this long are left to their budget: a stretch moves them by a few percent at most,
#: and spanning every brick made the timed rounds of the onnx wheel's CNNs seven times longer.
SHORT_CALL_S = 20e-6
#: ... and so are bricks that make less than this part of every model using them (by the times known so
#: far): a stretch moves such a model by a few percent at most, and spanning every microsecond brick of
#: four transformer and scikit-learn models (108 bricks) took their first run from 2.9 s to 6.8 s.
SPAN_SHARE = 0.05
#: The time limit of a brick item, when pytest-benchmark was handed a shorter one (see :func:`_budget_rounds`).
TIME_LIMIT = pytest.StashKey[float]()
#: Warm calls timed before the rounds; the fastest gives the brick's time (see :func:`_budget_rounds`).
PROBE_CALLS = 3
#: ... unless one call takes this long: its time is then known well enough for the budget, and two more
#: calls of every brick of a millisecond or more cost the onnx wheel's CNNs a second of a 28 s first run.
PROBE_ENOUGH_S = 1e-3


def brick_mark(run: DLBricksRun, config: pytest.Config) -> pytest.MarkDecorator:
    """pytest-benchmark's settings for brick items: the run's clock, which leaves out the rewriting of
    inputs, and rounds until precise unless the user set a precision of their own.

    The clock goes through the mark's public ``timer`` option: ``benchmark.pedantic(setup=...)``
    would also leave the rewriting out, but only at one call per round and a fixed number of rounds,
    without pytest-benchmark's calibration and ``precision``.
    """
    if run.settings.precision is None or config.getoption("benchmark_precision", None) is not None:
        return pytest.mark.benchmark(timer=run.clock)
    return pytest.mark.benchmark(timer=run.clock, precision=run.settings.precision, confidence=PRECISION_CONFIDENCE)


def brick_test(run: DLBricksRun, signature: str) -> Callable[..., None]:
    """The test function of one distinct brick: builds it, checks it, times it with pytest-benchmark."""

    def test_brick(request: pytest.FixtureRequest) -> None:
        brick = run.bricks[signature]
        unsupported = run.unsupported_wherever_used(signature)
        if unsupported is not None:
            pytest.skip(f"brick {brick.label} is not supported here: {unsupported}")
        try:
            runner = run.brick_runner(signature)
            runner.check()
        except UnsupportedByProvider as error:
            run.mark_unsupported(signature, str(error))
            pytest.skip(f"brick {brick.label} is not supported here: {error}")
        except BrickError as error:
            users = ", ".join(run.models_using(signature))
            hint = dims_hint(run.dims_left_at_default(signature), DEFAULT_DIM)
            # from None: the message says it all, pytest would otherwise show the exception chain.
            raise pytest.fail.Exception(
                f"brick {brick.label} (used by {users}): {error}{hint}", pytrace=False
            ) from None
        if runner.placement is not None:
            run.record_placement(signature, runner.placement.providers)
        run.measure_overhead()
        if _timed(request.config):
            run.measure_peak()
        run.speed.sample_if_due()
        clock = run.clock

        def call() -> None:
            clock.untimed(runner.prepare_call)
            runner()

        probe_s = _budget_rounds(request.node, run, signature, call)
        if not follows(probe_s):  # what the brick before leaves is within its precision (see :mod:`.neighbours`)
            runner.before = None
            run.recent_runners.discard(signature)
        # Requested only now, so that a brick that cannot run leaves pytest-benchmark no unused fixture to warn of.
        benchmark = request.getfixturevalue("benchmark")
        benchmark.extra_info.update(
            {"signature": signature, "ops": list(brick.ops), "models": run.models_using(signature)}
        )
        if runner.flush is not None:
            benchmark.extra_info["cache_flush_bytes"] = run.flush_bytes(signature)
        if runner.cold is not None:
            benchmark.extra_info["cold_input_bytes"] = runner.cold.distance
        if runner.before is not None:
            benchmark.extra_info["timed_after"] = runner.before.brick.signature
        # The machine's speed right around the timing, in its fast state (see :meth:`.SpeedTrace.settled`):
        # the call cost taken off the brick follows it.
        before = run.speed.settled() if benchmark.enabled else None
        run.load.around(lambda: benchmark(call))
        if benchmark.stats:
            after = run.speed.now()
            stats = benchmark.stats.stats
            run.record_result(
                signature,
                BrickResult(
                    stats={name: float(getattr(stats, name)) for name in KEPT_STATS},
                    provider=runner.provider,
                    probe_s=probe_s if probe_s > 0 else None,  # a coarse timer may read 0
                    reference_s=(before + after) / 2 if before and after else None,
                ),
            )

    test_brick.dlbricks_signature = signature  # type: ignore[attr-defined]
    return test_brick


def _timed(config: pytest.Config) -> bool:
    """Whether pytest-benchmark times the brick items, as its own session decided (``--benchmark-disable``,
    ``--benchmark-skip``, pytest-xdist)."""
    benchmarks = config.pluginmanager.get_plugin("pytest-benchmark")
    return benchmarks is not None and not (benchmarks.disabled or benchmarks.skip)


def _budget_rounds(item: pytest.Item, run: DLBricksRun, signature: str, call: Callable[[], None]) -> float:
    """Set the rounds the brick is timed for: to the precision its part in the models' estimates asks (see
    :mod:`.budget`), over at least :data:`MIN_SPAN_S` (or pytest-benchmark's ``max_time``, if shorter) for
    a brick of microseconds that makes a sizeable part of a model, within the time limit.

    The brick's time is the fastest of :data:`PROBE_CALLS` calls (one, for a brick of
    :data:`PROBE_ENOUGH_S` or more), timed as the rounds will be: they follow the check, which pays the
    first call's allocations, so it is the brick's warm time. The
    precision is left alone when the run times every brick to a precision of pytest-benchmark's own,
    or none. Returns the brick's time, which the store keeps to size its precision again on reuse.

    pytest-benchmark stops at ``max_time`` as its timer reads it, and the run's clock leaves out what prepares
    each call (its inputs written again, its weights pushed out of the caches): a brick whose calls read a
    quarter of a gigabyte first, 0.23 ms timed after some 25 ms of reading, ran 1,829 rounds and 46 s for a
    limit of 1 s. The limit handed to it is the user's, shortened by the part of a call the clock leaves out
    (kept in the item's stash under :data:`TIME_LIMIT`, the limit the brick is said to have run out of).
    """
    marker = item.get_closest_marker("benchmark")
    options = dict(marker.kwargs) if marker is not None else {}
    clock = run.clock
    seconds, timed, untimed = float("inf"), 0.0, 0.0
    for _ in range(PROBE_CALLS):
        start, paused = clock(), clock.paused
        call()
        took = clock() - start
        seconds, timed, untimed = min(seconds, took), timed + took, untimed + clock.paused - paused
        if seconds >= PROBE_ENOUGH_S:
            break
    config = item.config
    limit = float(options.get("max_time", config.getoption("benchmark_max_time")))
    span = min(MIN_SPAN_S, limit)
    min_rounds = int(options.get("min_rounds", config.getoption("benchmark_min_rounds")))
    short = 0 < seconds < SHORT_CALL_S and span / seconds > min_rounds
    if short and run.brick_share(signature, seconds) >= SPAN_SHARE:
        options["min_rounds"] = math.ceil(span / seconds)
    target = options.get("precision")
    if target is not None:
        options["precision"] = run.brick_precision(signature, seconds, float(target))
    if timed > 0 and untimed > 0:
        options["max_time"] = limit * timed / (timed + untimed)
        item.stash[TIME_LIMIT] = limit
    if options:
        item.add_marker(pytest.mark.benchmark(**options), append=False)
    return seconds


def e2e_test(run: DLBricksRun, plan: ModelPlan, executor: str) -> Callable[..., None]:
    """The test function timing a whole model, each round right after timing its bricks again."""

    def test_model(request: pytest.FixtureRequest) -> None:
        if plan.unsupported:
            unsupported = len(plan.unsupported)
            what = "1 of its bricks is" if unsupported == 1 else f"{unsupported} of its bricks are"
            pytest.skip(f"{plan.path}: {what} not supported here; no estimate")
        try:
            model = run.whole_model_runner(plan, parallel=executor == "parallel")
            model.check()
            runners: dict[str, BrickRunner] = {}
            for signature in plan.signatures:
                runners[signature] = run.brick_runner(signature, at_hand=runners)
        except UnsupportedByProvider as error:
            pytest.skip(f"{plan.path}: the whole model is not supported here: {error}")
        except (BrickError, ModelError) as error:
            cause = error.cause if isinstance(error, ModelError) else error
            hint = dims_hint(list(plan.guessed_dims), DEFAULT_DIM)
            raise pytest.fail.Exception(
                f"{plan.path}: cannot time the whole model: {cause}{hint}", pytrace=False
            ) from None
        benchmark = request.getfixturevalue("benchmark")
        bricks = BrickRounds(runners, model, run.speed.settled)
        run.measure_overhead()
        run.speed.sample_if_due()
        start = time.perf_counter()
        model()
        bricks()
        rounds = rounds_for(time.perf_counter() - start)
        benchmark.extra_info.update({"model": plan.path, "executor": executor})

        def timed() -> None:
            benchmark.pedantic(model, setup=bricks, rounds=rounds, warmup_rounds=1)

        if executor == "parallel":
            # The parallel executor's caller waits on its inter-op threads by design: off its core for
            # no load of the machine's, so its rounds would read as load (see :mod:`.load`).
            timed()
        else:
            run.load.around(timed)
        if benchmark.stats:
            run.record_validation(
                plan.path,
                executor,
                Validation(executor, list(benchmark.stats.stats.data), bricks.rounds, bricks.references),
            )

    return test_model


def signature_of(item: pytest.Item) -> str | None:
    """The signature of a brick item's brick; None for any other item."""
    obj = getattr(item, "obj", None) if isinstance(item, pytest.Function) else None
    signature = getattr(obj, "dlbricks_signature", None)
    return signature if isinstance(signature, str) else None
