"""Counting bricks and models under valgrind's callgrind: the jobs, the worker processes, their counts.

Each job is a model file and its inputs, called a few times. Python, numpy and onnxruntime take
seconds to start under valgrind, so a run's jobs are shared among at most :data:`WORKERS` worker
processes (see :mod:`.simulation_worker`), started once each, which take the jobs from one list, the
heaviest first, and count each in a child process forked from the same state. callgrind simulates the
caches of :data:`.cycle_model.CACHES`, whatever the caches of the machine, and counts only between the
instrumentation hooks; each job's counts come back as its child's callgrind output, read through its
documented header lines (see :mod:`.callgrind_output`). The lightest job is also counted once by every
worker: how far those counts lie apart is the run's measure of its counts' repeatability.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper

from ..core.cycle_model import CACHES, NO_COST, SimulatedCost
from ..core.graph import MIN_IR_VERSION
from ..core.wording import plural
from .callgrind_output import CallgrindOutputError, read_part

#: The oldest valgrind whose callgrind takes every option used here (``--instr-atstart``, ``--dump-instr``)
#: and the client requests of pytest-codspeed's hooks.
MIN_VALGRIND = (3, 15)
#: Worker processes run at once: each holds a core for the whole simulation.
WORKERS = 2
#: Calls counted per job at the most, and the work (FLOPs, or bytes' worth) under which a job gets them all:
#: a heavy brick's calls vary little, a light one's are counted over more calls (about 1e8 FLOPs in all).
MAX_CALLS = 30
LIGHT_WORK = 1e8 / MAX_CALLS


@dataclass(frozen=True)
class SimulationJob:
    """One brick or model to count: ``calls`` warm calls of ``model`` on ``feeds`` (input names in order),
    run at onnxruntime's graph optimization level ``optimization`` (a ``GraphOptimizationLevel`` name)."""

    name: str
    model: Path
    feeds: Path
    inputs: tuple[str, ...]
    calls: int
    optimization: str
    data_dir: Path | None = None
    #: The work it was expected to do (FLOPs, or bytes' worth; 0 when unknown): the heaviest jobs are taken first.
    work: float = 0.0
    #: onnxruntime optimizers its session leaves out (see :func:`.runtime.disabled_optimizers`).
    disabled_optimizers: tuple[str, ...] = ()


def calls_for(work: float) -> int:
    """Calls to count of a job doing ``work``: :data:`MAX_CALLS` for a light one, down to one."""
    return max(1, min(MAX_CALLS, int(MAX_CALLS * LIGHT_WORK / work))) if work > 0 else MAX_CALLS


def simulator_problem() -> str | None:
    """Why bricks cannot be simulated here (valgrind missing or too old, or the hooks missing); None if they can."""
    found = shutil.which("valgrind")
    if found is None:
        return "valgrind is not installed: install it (Debian and Ubuntu: apt-get install valgrind)"
    version = valgrind_version(found)
    if version is None or version < MIN_VALGRIND:
        shown = ".".join(map(str, version)) if version else "of unknown version"
        need = ".".join(map(str, MIN_VALGRIND))
        return f"valgrind {shown} is too old, {need} or later is needed (Debian and Ubuntu: apt-get install valgrind)"
    if importlib.util.find_spec("pytest_codspeed") is None:
        return (
            "the instrumentation hooks come with pytest-codspeed, which is not installed:"
            " pip install 'pytest-dlbricks[simulated]'"
        )
    return None


def valgrind_version(executable: str = "valgrind") -> tuple[int, ...] | None:
    """valgrind's version as numbers (``valgrind --version`` prints ``valgrind-3.19.0``); None if unknown."""
    try:
        printed = subprocess.run([executable, "--version"], capture_output=True, text=True, check=False).stdout
    except OSError:
        return None
    match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", printed)
    return tuple(int(number) for number in match.groups() if number is not None) if match else None


def save_job(
    folder: Path,
    name: str,
    model: bytes | Path,
    feeds: Mapping[str, np.ndarray],
    calls: int,
    optimization: str,
    data_dir: Path | None = None,
    work: float = 0.0,
    disabled_optimizers: Sequence[str] = (),
) -> SimulationJob:
    """A job whose model (serialized, or a file left where it is) and inputs are saved in ``folder``."""
    stem = folder / f"job{len(list(folder.glob('job*.npz')))}"
    if isinstance(model, bytes):
        stem.with_suffix(".onnx").write_bytes(model)
        model = stem.with_suffix(".onnx")
    np.savez(stem.with_suffix(".npz"), *feeds.values())
    return SimulationJob(
        name,
        model,
        stem.with_suffix(".npz"),
        tuple(feeds),
        calls,
        optimization,
        data_dir,
        work,
        tuple(disabled_optimizers),
    )


@dataclass(frozen=True)
class SimulationCounts:
    """What a simulation counted: one call's cost of every job that ran and why each other failed, by job name;
    and the job every worker counted besides (None when one worker ran), with each worker's cost of it."""

    costs: dict[str, SimulatedCost]
    errors: dict[str, str]
    repeated: str | None = None
    repeats: tuple[SimulatedCost, ...] = ()


def simulate(jobs: Sequence[SimulationJob], folder: Path, *, repeat: bool = True) -> SimulationCounts:
    """Count ``jobs`` in at most :data:`WORKERS` worker processes at once, each warmed up on a tiny model, and
    with ``repeat`` the lightest job once more in each worker. Raises :class:`SimulationError` when a worker
    fails whole."""
    ordered = sorted(jobs, key=lambda job: -job.work)
    workers = min(WORKERS, len(jobs))
    repeated = min(jobs, key=lambda job: job.work) if repeat and workers > 1 else None
    # The same warm-up whatever the jobs: the lightest model of the call cost that hands a tensor on.
    warm = _chains_job(folder, chain_name(2), 1, 2, "ORT_ENABLE_ALL")
    jobs_file = folder / "jobs.json"
    spec = {
        "jobs": [_as_spec(job) for job in ordered],
        "each": [_as_spec(repeated)] if repeated else [],
        "warm": _as_spec(warm),
    }
    jobs_file.write_text(json.dumps(spec), encoding="utf-8")
    processes = [_start(jobs_file, worker) for worker in range(workers)]
    failures = []
    for process in processes:
        _, stderr = process.communicate()
        if process.returncode != 0:
            tail = " ".join(stderr.strip().splitlines()[-3:])
            failures.append(f"the simulation worker failed (exit status {process.returncode}): {tail}")
    if failures:
        raise SimulationError(failures[0])
    costs: dict[str, SimulatedCost] = {}
    errors: dict[str, str] = {}
    for index, job in enumerate(ordered):
        outcome = _outcome(folder, str(index), job)
        if isinstance(outcome, str):
            errors[job.name] = outcome
        else:
            costs[job.name] = outcome
    if repeated is None:
        return SimulationCounts(costs, errors)
    repeats = [_outcome(folder, f"repeat{worker}", repeated) for worker in range(workers)]
    counted = tuple(cost for cost in repeats if isinstance(cost, SimulatedCost))
    return SimulationCounts(costs, errors, repeated.name, counted)


def _outcome(folder: Path, key: str, job: SimulationJob) -> SimulatedCost | str:
    """One call's cost of a job from the result its child wrote and its callgrind output, or why there is none."""
    try:
        entry = json.loads((folder / f"result.{key}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "its worker's child process ended before it was counted"
    if "error" in entry:
        return str(entry["error"])
    try:
        totals = read_part(folder / f"callgrind.out.{entry['pid']}.1").totals
    except CallgrindOutputError as error:
        return f"its callgrind output is missing or damaged ({error})"
    return SimulatedCost.from_events(totals, job.calls)


def _as_spec(job: SimulationJob) -> dict[str, Any]:
    """A job as the worker reads it."""
    return {
        "name": job.name,
        "model": str(job.model),
        "feeds": str(job.feeds),
        "inputs": list(job.inputs),
        "calls": job.calls,
        "optimization": job.optimization,
        "data_dir": str(job.data_dir) if job.data_dir else None,
        "disabled_optimizers": list(job.disabled_optimizers),
    }


def _start(jobs_file: Path, worker: int) -> subprocess.Popen[str]:
    caches = [f"--{name}={size},{ways},{line}" for name, (size, ways, line) in CACHES.items()]
    out = jobs_file.with_name("callgrind.out.%p")  # each child's counts in a file of its own
    command = [
        *("valgrind", "--tool=callgrind", "--instr-atstart=no", "--cache-sim=yes", "--dump-instr=no", *caches),
        *(f"--callgrind-out-file={out}", "-q", sys.executable, "-m", "pytest_dlbricks.simulating.simulation_worker"),
        *(str(jobs_file), str(worker)),
    ]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=worker_env())


def worker_env() -> dict[str, str]:
    """The environment of a worker: one thread everywhere, and the same hashing in every run, so that counts repeat
    from run to run; and onnxruntime's telemetry disabled by its variable. Otherwise it starts threads at import
    that collect and upload, and one that wakes on wall-clock timers: valgrind runs them between the worker's own
    steps as often as time allows, and the state the worker forks its children from then depends on the load."""
    return {**os.environ, "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1", "ORT_DISABLE_TELEMETRY": "1"}


#: Lengths of the chains counted in every run besides those of its bricks and models: a trivial layer's own cost is
#: read between the two longest (see :attr:`CallCosts.layer`), what inputs and outputs add against the chain of 4.
LAYER_CHAINS = (4, 8, 16)
#: The tiny model whose cost beside the chain of four gives what inputs and outputs add to a call: two chains of two
#: layers side by side, two inputs and two outputs.
PAIR = "call: 2 inputs and outputs"
#: What every call-cost job's name starts with (see :func:`chain_name`, :data:`PAIR`).
CALL_PREFIX = "call: "


def chain_name(layers: int) -> str:
    """The name of the job counting a call of a chain of ``layers`` one-number layers."""
    return f"{CALL_PREFIX}{plural(layers, 'layer')}"


def call_jobs(folder: Path, optimization: str, lengths: Iterable[int] = ()) -> list[SimulationJob]:
    """Jobs counting a call of a chain of Neg layers on one number of each of ``lengths`` and of
    :data:`LAYER_CHAINS`, and :data:`PAIR`; the chain of two first, the lightest that hands a tensor on."""
    wanted = sorted({2, *LAYER_CHAINS, *lengths} - {0}, key=lambda layers: (layers != 2, layers))
    jobs = [_chains_job(folder, chain_name(layers), 1, layers, optimization) for layers in wanted]
    return [*jobs, _chains_job(folder, PAIR, 2, 2, optimization)]


def _chains_job(folder: Path, name: str, paths: int, layers: int, optimization: str) -> SimulationJob:
    """A job calling ``paths`` chains of ``layers`` Neg layers side by side, each on one number of its own."""
    nodes, inputs, outputs = [], [], []
    for path in range(paths):
        names = [f"x{path}_{layer}" for layer in range(layers + 1)]
        nodes += [helper.make_node("Neg", [a], [b]) for a, b in itertools.pairwise(names)]
        inputs.append(helper.make_tensor_value_info(names[0], onnx.TensorProto.FLOAT, [1]))
        outputs.append(helper.make_tensor_value_info(names[-1], onnx.TensorProto.FLOAT, [1]))
    model = helper.make_model(helper.make_graph(nodes, "call", inputs, outputs))
    model.ir_version = MIN_IR_VERSION
    feeds = {value.name: np.ones(1, np.float32) for value in inputs}
    return save_job(folder, name, model.SerializeToString(), feeds, MAX_CALLS, optimization)


@dataclass(frozen=True)
class CallCosts:
    """What an inference call costs beyond its layers' work, in simulated events: by how many layers it runs and
    how many tensors they share, and per input and output beyond the first (the simulated counterpart of
    :class:`.overhead.CallOverhead`).

    A call's own cost depends on what it runs, not on its inputs and outputs alone: onnxruntime sets up, each
    call, the memory its layers' tensors share, and that set-up steps up from one layer to two and from two to
    three, then grows slowly. One fixed cost, taken off every brick of two layers and counted once for a model
    of six, left the sample mlp's composed instructions 5% over the whole model's. A chain of ``k`` layers on
    one number (``chains``) shares ``k - 1`` tensors; a call of ``layers`` layers sharing ``shared`` tensors (a
    brick's first layer's output may also leave it, a view's shares its input's memory) is counted as the chain
    sharing as many and, for its other layers, a long chain's cost a layer. Composition takes each brick's call
    off it and adds the model's; as a model's bricks hold each of its layers once, the trivial layers cancel.
    """

    chains: dict[int, SimulatedCost]
    per_input: SimulatedCost
    per_output: SimulatedCost

    @classmethod
    def taken_from(cls, costs: dict[str, SimulatedCost]) -> CallCosts | None:
        """The call costs counted among ``costs`` (by job name), taken out of it; None if one of the chains of
        :data:`LAYER_CHAINS` or :data:`PAIR` is missing. Inputs and outputs: what the pair costs beyond the chain
        of four, half on inputs, half on outputs, none where it costs less (with outputs bound they cost about
        nothing; the brick store, as for times, would also refuse a cost below zero)."""
        calls = {name: costs.pop(name) for name in list(costs) if name.startswith(CALL_PREFIX)}
        pair = calls.pop(PAIR, None)
        chains = {int(name.removeprefix(CALL_PREFIX).split()[0]): cost for name, cost in calls.items()}
        if pair is None or any(layers not in chains for layers in LAYER_CHAINS):
            return None
        each = _half_or_none(pair.minus(chains[4]))
        return cls(chains, each, each)

    def of(self, layers: int, shared: int, inputs: int, outputs: int) -> SimulatedCost | None:
        """What a call of ``layers`` layers sharing ``shared`` tensors, with these many inputs and outputs, costs,
        as many trivial layers' work included; None if no chain sharing as many was counted."""
        chain = self.chains.get(shared + 1)
        if chain is None:
            return None
        others = chain.plus(self.layer, layers - shared - 1)
        return others.plus(self.per_input, max(inputs - 1, 0)).plus(self.per_output, max(outputs - 1, 0))

    @property
    def layer(self) -> SimulatedCost:
        """What one more trivial layer costs a long chain: its work and its dispatch."""
        shorter, longer = LAYER_CHAINS[-2:]
        return NO_COST.plus(self.chains[longer].minus(self.chains[shorter]), 1 / (longer - shorter))

    def fixed(self, layers: int) -> SimulatedCost:
        """One cost for every call of ``layers`` layers, their work aside, as composition of times takes off each
        brick (it knows no length): the chain's less that many trivial layers."""
        return self.chains[layers].plus(self.layer, -layers)


def _half_or_none(cost: SimulatedCost) -> SimulatedCost:
    return SimulatedCost(*(max(value / 2, 0.0) for value in vars(cost).values()))


class SimulationError(Exception):
    """The simulation could not be run at all."""
