"""What a simulated run counted: every brick's and whole model's cost, what failed, and what it took.

Created by the run's engine in simulated mode (``--dlbricks-cost=simulated``) and filled by the items
of :mod:`.simulated`; composition of simulated costs is their sum, exact, so the report sets each
model's composed cost beside the whole model's, in instructions and simulated time.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ..core.cycle_model import NO_COST, SimulatedCost, describe_model
from ..core.wording import plural
from ..cut.cutting import ModelPlan
from ..timing.overhead import CallOverhead
from .simulation import (
    CALL_MODELS,
    WORKERS,
    CallCosts,
    SimulationCounts,
    SimulationError,
    SimulationJob,
    simulate,
    valgrind_version,
)


class Simulation:
    """The costs of one run, by brick signature and by model path, and why the others could not be counted."""

    def __init__(self) -> None:
        self.bricks: dict[str, SimulatedCost] = {}
        self.models: dict[str, SimulatedCost] = {}
        self.errors: dict[str, str] = {}
        #: Inputs and outputs of each brick, whose call costs are taken off it.
        self.io: dict[str, tuple[int, int]] = {}
        #: What a call costs beyond its layers, once counted (see :data:`.simulation.CALL_MODELS`).
        self.call: CallCosts | None = None
        self.wall_s = 0.0
        self.worker_starts = 0
        #: The counts of the simulation whose workers each counted one job once more (see :func:`.simulation.simulate`).
        self.repeated: SimulationCounts | None = None

    def known(self, name: str) -> bool:
        """Whether a brick or model was simulated already, or failed to be."""
        return name in self.bricks or name in self.models or name in self.errors

    def count(self, make_jobs: Callable[[Path], list[SimulationJob]], *, models: bool = False) -> None:
        """Simulate the jobs ``make_jobs`` saves in the folder it is given (bricks, or with ``models`` whole
        models) and keep their costs or errors; the folder is removed after."""
        start = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="dlbricks-simulation-") as folder:
            jobs = make_jobs(Path(folder))
            if not jobs:
                return
            try:
                counts = simulate(jobs, Path(folder), repeat=not models)
            except SimulationError as error:
                counts = SimulationCounts({}, {job.name: str(error) for job in jobs})
        costs, errors = counts.costs, counts.errors
        if counts.repeats:
            self.repeated = counts
        self.wall_s += time.perf_counter() - start
        self.worker_starts += min(len(jobs), WORKERS)
        calls = {name: costs.pop(name) for name in CALL_MODELS if name in costs}
        if len(calls) == len(CALL_MODELS):
            self.call = CallCosts.from_costs(calls)
        (self.models if models else self.bricks).update(costs)
        self.errors.update(errors)

    def call_overhead(self) -> CallOverhead | None:
        """The call's cost as composition takes it off bricks and counts it once per model, in simulated seconds."""
        if self.call is None:
            return None
        return CallOverhead(self.call.fixed.seconds, self.call.per_input.seconds, self.call.per_output.seconds)

    def cost(self, name: str, *, model: bool = False) -> SimulatedCost:
        """A brick's (or ``model``'s) cost; raises :class:`.simulation.SimulationError` when it has none."""
        costs = self.models if model else self.bricks
        if name in costs:
            return costs[name]
        raise SimulationError(self.errors.get(name, "it was not simulated"))

    def composed(self, plan: ModelPlan) -> SimulatedCost | None:
        """The sum of a model's brick costs, each as often as the model calls it, with a call's cost taken off
        each and counted once for the model (as composition does with times); None if one is missing."""
        call = self.call or CallCosts(NO_COST, NO_COST, NO_COST)
        total = call.of(*plan.io)
        for signature, count in plan.signatures.items():
            if signature not in self.bricks:
                return None
            total = total.plus(self.bricks[signature].minus(call.of(*self.io[signature])), count)
        return total

    def report(self, plans: Iterable[ModelPlan]) -> dict[str, Any]:
        """The simulation's part of the JSON report: the cycle model, every cost, the composition's error."""
        version = valgrind_version()
        return {
            "cost": "simulated",
            "valgrind": ".".join(map(str, version)) if version else None,
            "cycle_model": describe_model(),
            "call": None if self.call is None else {name: cost.as_json() for name, cost in vars(self.call).items()},
            "wall_s": self.wall_s,
            "worker_starts": self.worker_starts,
            "repeat": self.repeat(),
            "bricks": {signature: cost.as_json() for signature, cost in self.bricks.items()},
            "models": {plan.path: self._model_entry(plan) for plan in plans if plan.path in self.models},
            "errors": dict(self.errors),
        }

    def repeat(self) -> dict[str, Any] | None:
        """The job every worker counted, its cost in each and their spread (largest over smallest, less one);
        None when one worker ran."""
        if self.repeated is None or len(self.repeated.repeats) < 2:
            return None
        repeats = self.repeated.repeats
        seconds = [cost.seconds for cost in repeats]
        return {
            "job": self.repeated.repeated,
            "simulated_s": seconds,
            "instructions": [cost.instructions for cost in repeats],
            "spread": max(seconds) / min(seconds) - 1 if min(seconds) > 0 else None,
        }

    def _model_entry(self, plan: ModelPlan) -> dict[str, Any]:
        whole = self.models[plan.path]
        composed = self.composed(plan)
        entry: dict[str, Any] = {"whole": whole.as_json(), "composed": None}
        if composed is not None:
            entry["composed"] = composed.as_json()
            entry["instructions_ratio"] = composed.instructions / whole.instructions if whole.instructions else None
            entry["simulated_s_ratio"] = composed.seconds / whole.seconds if whole.seconds else None
        return entry

    def summary(self) -> str:
        """The line the terminal summary gives the simulation."""
        models = f" and {plural(len(self.models), 'whole model')}" if self.models else ""
        return (
            f"dlbricks: simulated cost: {plural(len(self.bricks), 'brick')}{models} counted under callgrind in"
            f" {self.wall_s:.1f} s ({plural(self.worker_starts, 'worker start')}); the simulated machine is an AVX2"
            " machine (valgrind hides AVX-512), its time that of a cycle model"
        )
