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
        #: Layers, tensors they share, inputs and outputs of each brick's call, whose cost is taken off it.
        self.calls: dict[str, tuple[int, int, int, int]] = {}
        #: What a call costs beyond its layers' work, once counted (see :class:`.simulation.CallCosts`).
        self.call: CallCosts | None = None
        self.wall_s = 0.0
        self.worker_starts = 0
        #: The counts of the simulation whose workers each counted one job once more (see :func:`.simulation.simulate`).
        self.repeated: SimulationCounts | None = None

    def known(self, name: str) -> bool:
        """Whether a brick or model was simulated already, or failed to be."""
        return name in self.bricks or name in self.models or name in self.errors

    def count(self, make_jobs: Callable[[Path], tuple[list[SimulationJob], list[SimulationJob]]]) -> None:
        """Simulate the jobs ``make_jobs`` saves in the folder it is given, bricks' and whole models', in one batch of
        workers, and keep their costs or errors; the folder is removed after. A run's whole models share the bricks'
        workers: started apart, a model of the heaviest held one worker long after the other had ended."""
        start = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="dlbricks-simulation-") as folder:
            bricks, models = make_jobs(Path(folder))
            jobs = [*bricks, *models]
            if not jobs:
                return
            try:
                counts = simulate(jobs, Path(folder), repeat=bool(bricks))
            except SimulationError as error:
                counts = SimulationCounts({}, {job.name: str(error) for job in jobs})
        costs, errors = counts.costs, counts.errors
        if counts.repeats:
            self.repeated = counts
        self.wall_s += time.perf_counter() - start
        self.worker_starts += min(len(jobs), WORKERS)
        self.call = CallCosts.taken_from(costs) or self.call
        whole = {job.name for job in models}
        self.models.update({name: cost for name, cost in costs.items() if name in whole})
        self.bricks.update({name: cost for name, cost in costs.items() if name not in whole})
        self.errors.update(errors)

    def call_overhead(self, granularity: int) -> CallOverhead | None:
        """The call's cost as composition of times takes it off bricks and counts it once per model, in simulated
        seconds: one fixed cost, that of a call of ``granularity`` layers (most bricks' length), their work aside."""
        if self.call is None:
            return None
        fixed = self.call.fixed(granularity).seconds
        return CallOverhead(max(fixed, 0.0), self.call.per_input.seconds, self.call.per_output.seconds)

    def cost(self, name: str, *, model: bool = False) -> SimulatedCost:
        """A brick's (or ``model``'s) cost; raises :class:`.simulation.SimulationError` when it has none."""
        costs = self.models if model else self.bricks
        if name in costs:
            return costs[name]
        raise SimulationError(self.errors.get(name, "it was not simulated"))

    def composed(self, plan: ModelPlan) -> SimulatedCost | None:
        """The sum of a model's brick costs, each as often as the model calls it, with its call's cost (see
        :attr:`calls`) taken off each and the model's call's counted once (see :class:`.simulation.CallCosts`);
        None if a brick's cost or call, or a chain a call is counted on, is missing."""
        model = self.model_call(plan)
        total = None if model is None else self._call_of(*model)
        for signature, count in plan.signatures.items():
            call = self._call_of(*self.calls[signature]) if signature in self.calls else None
            if signature not in self.bricks or call is None or total is None:
                return None
            total = total.plus(self.bricks[signature].minus(call), count)
        return total

    def model_call(self, plan: ModelPlan) -> tuple[int, int, int, int] | None:
        """The model's call as :attr:`calls` gives bricks': its tensors shared are its bricks' and those that
        leave a brick for another; None if a brick's call is unknown."""
        if any(signature not in self.calls for signature in plan.signatures):
            return None
        made = sum(count * (self.calls[s][1] + self.calls[s][3]) for s, count in plan.signatures.items())
        return plan.layers, made - plan.io[1], *plan.io

    def _call_of(self, layers: int, shared: int, inputs: int, outputs: int) -> SimulatedCost | None:
        return NO_COST if self.call is None else self.call.of(layers, shared, inputs, outputs)

    def report(self, plans: Iterable[ModelPlan]) -> dict[str, Any]:
        """The simulation's part of the JSON report: the cycle model, every cost, the composition's error."""
        version = valgrind_version()
        return {
            "cost": "simulated",
            "valgrind": ".".join(map(str, version)) if version else None,
            "cycle_model": describe_model(),
            "call": None if self.call is None else self._call_entry(self.call),
            "wall_s": self.wall_s,
            "worker_starts": self.worker_starts,
            "repeat": self.repeat(),
            "bricks": {signature: cost.as_json() for signature, cost in self.bricks.items()},
            "models": {plan.path: self._model_entry(plan) for plan in plans if plan.path in self.models},
            "errors": dict(self.errors),
        }

    @staticmethod
    def _call_entry(call: CallCosts) -> dict[str, Any]:
        chains = {str(layers): cost.as_json() for layers, cost in sorted(call.chains.items())}
        return {"chains": chains, "per_input": call.per_input.as_json(), "per_output": call.per_output.as_json()}

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
