"""The simulated cost mode (``--dlbricks-cost=simulated``): brick and model items counted under callgrind.

The first brick item of a run simulates every brick the run's items still need, in a few
worker starts (see :mod:`.simulation`); each brick item then reads its brick's cost and hands its
simulated time to pytest-benchmark through a clock that moves by exactly that time per call, so that
its statistics, histories and comparisons hold simulated seconds. Whole models (``--dlbricks-validate``)
are simulated alike, at their first item. Composition, the store and the reports take the figures
as they take measured times: one round, no spread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from ..core.cycle_model import SimulatedCost
from ..core.errors import ModelError
from ..core.runtime import disabled_optimizers, session_options
from ..core.synthetic import SynthesisError
from ..cut.bricks import BrickSpec
from ..cut.cutting import ModelPlan
from ..estimating.validation import Validation
from ..reporting.entries import BrickResult
from ..simulating.brick_edges import outputs_with_views_inside, shared_tensors, with_views_inside
from ..simulating.simulated_costs import Simulation
from ..simulating.simulation import SimulationError, SimulationJob, call_jobs, calls_for, save_job
from ..timing.synthesis import brick_feeds, build_brick_model
from .engine import DLBricksRun

#: The provider a simulated brick is reported to have run on.
SIMULATED_PROVIDER = "CPUExecutionProvider (callgrind)"


class StepClock:
    """A timer for pytest-benchmark that moves by ``step`` seconds each time :meth:`step_once` is called."""

    def __init__(self, step: float) -> None:
        self.now = 0.0
        self.step = step

    def __call__(self) -> float:
        return self.now

    def step_once(self) -> None:
        self.now += self.step


def exact_stats(seconds: float) -> dict[str, float]:
    """pytest-benchmark's statistics of one round of ``seconds``: a count has no spread."""
    same = ("min", "max", "mean", "median", "q1", "q3", "ld15iqr", "hd15iqr", "total")
    spread = ("stddev", "iqr", "iqr_outliers", "stddev_outliers")
    return {
        **dict.fromkeys(same, seconds),
        **dict.fromkeys(spread, 0.0),
        "rounds": 1.0,
        "ops": 1 / seconds if seconds > 0 else 0.0,
    }


def brick_cost(run: DLBricksRun, signature: str, wanted: Iterable[str], models: Iterable[ModelPlan]) -> SimulatedCost:
    """A brick's cost, simulating first every brick of ``wanted`` and every whole model of ``models`` the run has
    not simulated yet; raises :class:`SimulationError` when the brick could not be simulated."""
    simulation = _simulation(run)
    if not simulation.known(signature):
        todo = dict.fromkeys(s for s in (signature, *wanted) if not simulation.known(s))

        def make_jobs(folder: Path) -> tuple[list[SimulationJob], list[SimulationJob]]:
            jobs = [job for s in todo if (job := _brick_job(run, simulation, s, folder)) is not None]
            if simulation.call is None:
                level = session_options(run.settings).graph_optimization_level.name
                jobs += call_jobs(folder, level, _call_lengths(run, simulation))
            return jobs, _model_jobs(run, simulation, models, folder)

        simulation.count(make_jobs)
        if run.overhead is None:
            # A call cost kept in the store is the one its bricks were composed with: counted again, it could move
            # unchanged models by the little counts move between processes.
            run.overhead = simulation.call_overhead(run.settings.granularity)
    return simulation.cost(signature)


def model_cost(run: DLBricksRun, plan: ModelPlan, wanted: Iterable[ModelPlan]) -> SimulatedCost:
    """The whole model's cost, simulating first every model of ``wanted`` not simulated yet (where no brick item
    simulated them with its bricks)."""
    simulation = _simulation(run)
    if not simulation.known(plan.path):
        simulation.count(lambda folder: ([], _model_jobs(run, simulation, (plan, *wanted), folder)))
    return simulation.cost(plan.path, model=True)


def _model_jobs(
    run: DLBricksRun, simulation: Simulation, plans: Iterable[ModelPlan], folder: Path
) -> list[SimulationJob]:
    """Jobs of the whole models of ``plans`` not simulated yet, each once."""
    todo = {plan.path: plan for plan in plans if not simulation.known(plan.path)}
    return [job for plan in todo.values() if (job := _model_job(run, simulation, plan, folder)) is not None]


def _call_lengths(run: DLBricksRun, simulation: Simulation) -> set[int]:
    """The lengths of the chains whose cost composition takes off or adds (see :class:`.simulation.CallCosts`):
    sharing as many tensors as every brick's call and every model's, and of the granularity's length (see
    :meth:`.Simulation.call_overhead`)."""
    for signature, brick in run.bricks.items():
        simulation.calls.setdefault(signature, _call_shape(brick))
    models = [call for plan in run.plans if (call := simulation.model_call(plan)) is not None]
    return {*(call[1] + 1 for call in [*simulation.calls.values(), *models]), run.settings.granularity}


def _call_shape(brick: BrickSpec) -> tuple[int, int, int, int]:
    """A brick's call as composition takes it off (see :attr:`.Simulation.calls`), its views inside."""
    names = [name for name, _ in (*brick.outputs, *brick.non_tensor_outputs)]
    shared = shared_tensors(brick.nodes, outputs_with_views_inside(brick.nodes, names))
    return len(brick.nodes), shared, len(brick.inputs), brick.output_count


def _simulation(run: DLBricksRun) -> Simulation:
    assert run.simulation is not None, "simulated items are made only in simulated mode"
    return run.simulation


def _brick_job(run: DLBricksRun, simulation: Simulation, signature: str, folder: Path) -> SimulationJob | None:
    brick = run.bricks[signature]
    try:
        model = with_views_inside(build_brick_model(brick))
        feeds = brick_feeds(brick)
    except (SynthesisError, ValueError) as error:
        simulation.errors[signature] = f"cannot be built: {error}"
        return None
    simulation.calls[signature] = _call_shape(brick)
    level = session_options(run.settings, optimized=run.already_optimized(signature)).graph_optimization_level.name
    work = run.expected_cost(signature)
    disabled = disabled_optimizers(run.settings)
    return save_job(
        folder,
        signature,
        model.SerializeToString(),
        feeds,
        calls_for(work),
        level,
        work=work,
        disabled_optimizers=disabled,
    )


def _model_job(run: DLBricksRun, simulation: Simulation, plan: ModelPlan, folder: Path) -> SimulationJob | None:
    try:
        model, feeds, data_dir = run.whole_model_inputs(plan)
    except ModelError as error:
        simulation.errors[plan.path] = f"cannot be loaded: {error.cause}"
        return None
    data = model if isinstance(model, Path) else model.SerializeToString()
    level = session_options(run.settings).graph_optimization_level.name
    work = sum(run.expected_cost(signature) * count for signature, count in plan.signatures.items())
    disabled = disabled_optimizers(run.settings)
    return save_job(
        folder,
        plan.path,
        data,
        feeds,
        calls_for(work),
        level,
        data_dir=data_dir,
        work=work,
        disabled_optimizers=disabled,
    )


def _wanted(request: pytest.FixtureRequest, attribute: str) -> list[Any]:
    """What the session's simulated items of one kind stand for (``dlbricks_signature``: bricks, ``dlbricks_plan``:
    whole models), in their order."""
    return [
        wanted for item in request.session.items if (wanted := getattr(getattr(item, "obj", None), attribute, None))
    ]


def _benchmark_exactly(request: pytest.FixtureRequest, seconds: float, extra_info: dict[str, Any]) -> None:
    """One pytest-benchmark round of exactly ``seconds``, on a clock that moves by that much, so that
    histories and comparisons hold the simulated time."""
    clock = StepClock(seconds)
    request.node.add_marker(pytest.mark.benchmark(timer=clock, warmup=False), append=False)
    benchmark = request.getfixturevalue("benchmark")
    benchmark.extra_info.update(extra_info)
    benchmark.pedantic(clock.step_once, rounds=1, iterations=1)


def simulated_brick_test(run: DLBricksRun, signature: str) -> Callable[..., None]:
    """The test function of one distinct brick in simulated mode."""

    def test_brick(request: pytest.FixtureRequest) -> None:
        brick = run.bricks[signature]
        try:
            cost = brick_cost(run, signature, _wanted(request, "dlbricks_signature"), _wanted(request, "dlbricks_plan"))
        except SimulationError as error:
            raise pytest.fail.Exception(f"brick {brick.label}: cannot be simulated: {error}", pytrace=False) from None
        extra = {"signature": signature, "ops": list(brick.ops), "models": run.models_using(signature)}
        _benchmark_exactly(request, cost.seconds, {**extra, **cost.as_json()})
        run.record_result(signature, BrickResult(stats=exact_stats(cost.seconds), provider=SIMULATED_PROVIDER))

    test_brick.dlbricks_signature = signature  # type: ignore[attr-defined]
    return test_brick


def simulated_model_test(run: DLBricksRun, plan: ModelPlan) -> Callable[..., None]:
    """The test function of a whole model in simulated mode: the model counted as its bricks are."""

    def test_model(request: pytest.FixtureRequest) -> None:
        try:
            cost = model_cost(run, plan, _wanted(request, "dlbricks_plan"))
        except SimulationError as error:
            raise pytest.fail.Exception(f"{plan.path}: cannot be simulated whole: {error}", pytrace=False) from None
        _benchmark_exactly(request, cost.seconds, {"model": plan.path, "executor": "sequential", **cost.as_json()})
        bricks = _simulation(run).bricks
        rounds = [{signature: bricks[signature].seconds for signature in plan.signatures if signature in bricks}]
        run.record_validation(plan.path, "sequential", Validation("sequential", [cost.seconds], rounds))

    test_model.dlbricks_plan = plan  # type: ignore[attr-defined]
    return test_model
