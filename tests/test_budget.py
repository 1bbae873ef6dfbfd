"""Each brick's precision from its part in the models' estimates: every estimate still reaches the run's."""

from __future__ import annotations

import json
import math
import random
import shutil
import time
from dataclasses import astuple
from pathlib import Path

import pytest

from conftest import SAMPLE_MODELS, run_dlbricks
from pytest_dlbricks.core.budget import LOOSEST, Use, brick_precision, estimate_precision, largest_share
from pytest_dlbricks.core.clock import PausableClock
from pytest_dlbricks.core.settings import Settings
from pytest_dlbricks.estimating.analysis import BrickWork, LayerWork
from pytest_dlbricks.reporting.entries import BrickResult
from pytest_dlbricks.timing.overhead import NO_OVERHEAD, CallOverhead
from pytest_dlbricks.timing.probes import Peak
from pytest_dlbricks.wiring import engine, items
from pytest_dlbricks.wiring.engine import DLBricksRun
from pytest_dlbricks.wiring.run_state import PEAK_HEADROOM

#: A machine's peak, as a run measures it or reads it from the store.
PEAK = Peak(flops_per_s=2e9, bytes_per_s=1e9, method={"gemm": "stub"})


def test_a_model_of_one_brick_asks_the_run_s_precision() -> None:
    assert brick_precision(0.02, 1e-3, 1e-3, [Use(1, 0.0, 0.0)]) == pytest.approx(0.02)


def test_a_brick_of_a_hundredth_of_a_model_may_err_ten_times_more() -> None:
    assert brick_precision(0.02, 1e-5, 1e-5, [Use(1, 99e-5, 99e-5)]) == pytest.approx(0.2)


def test_the_strictest_model_decides_and_no_brick_goes_past_the_loosest_margin() -> None:
    alone, among = Use(1, 0.0, 0.0), Use(1, 1.0, 1.0)
    assert brick_precision(0.02, 1e-6, 1e-6, [among, alone]) == pytest.approx(0.02)
    assert brick_precision(0.02, 1e-6, 1e-6, [among]) == LOOSEST
    assert brick_precision(0.5, 1e-6, 1e-6, [among]) == 0.5, "a run asking for less than the loosest gets it"
    assert brick_precision(0.02, 1e-6, 1e-6, []) == 0.02


def test_a_brick_s_share_is_its_largest_part_of_a_model_known_so_far() -> None:
    assert largest_share(1e-6, [Use(3, 0.0, 7e-6), Use(1, 0.0, 99e-6)]) == pytest.approx(0.3)
    assert largest_share(1e-6, [Use(1, 0.0, 0.0)]) == 1.0, "all that is known of its model"
    assert largest_share(1e-6, []) == 0.0
    assert largest_share(1e-6, [Use(1, 0.0, 0.0, 9e-6)]) == pytest.approx(0.1), "the rest costs its calls at least"


@pytest.mark.parametrize("seed", range(20))
def test_estimates_reach_the_run_s_precision_whatever_the_order(seed: int) -> None:
    """Bricks timed one after the other, each to the margin it is given from the bricks known before it: the
    model's margin, in quadrature, never exceeds the target (call overhead taken off as composition does)."""
    rng = random.Random(seed)
    target, overhead = 0.02, rng.choice([0.0, 2e-6])
    bricks = [(rng.randint(1, 4), 10 ** rng.uniform(-6, -2)) for _ in range(rng.randint(1, 40))]
    known_net, known_raw, squared = overhead, 0.0, 0.0
    for count, seconds in bricks:
        net = max(seconds - overhead, 0.0)
        margin = brick_precision(target, seconds, net, [Use(count, known_net, known_raw)])
        squared += (count * seconds * margin) ** 2
        known_net, known_raw = known_net + count * net, known_raw + count * seconds
    assert math.sqrt(squared) <= target * known_net * (1 + 1e-9)


@pytest.mark.parametrize("seed", range(20))
def test_estimates_reach_the_run_s_precision_with_bricks_not_timed_yet_counted_at_their_least(seed: int) -> None:
    """As above, the bricks not timed yet counted at a part of their time (their FLOPs at a multiple of the peak
    never exceed it): the first bricks are timed less precisely, and the model still reaches the target."""
    rng = random.Random(seed)
    target, overhead = 0.02, rng.choice([0.0, 2e-6])
    bricks = [(rng.randint(1, 4), 10 ** rng.uniform(-6, -2), rng.random()) for _ in range(rng.randint(1, 40))]
    least = [count * fraction * max(seconds - overhead, 0.0) for count, seconds, fraction in bricks]
    known_net, known_raw, squared = overhead, 0.0, 0.0
    for index, (count, seconds, _) in enumerate(bricks):
        net, rest = max(seconds - overhead, 0.0), sum(least[index + 1 :])
        margin = brick_precision(target, seconds, net, [Use(count, known_net + rest, known_raw + rest)])
        squared += (count * seconds * margin) ** 2
        known_net, known_raw = known_net + count * net, known_raw + count * seconds
    assert math.sqrt(squared) <= target * known_net * (1 + 1e-9)


def test_an_estimate_s_margin_adds_its_bricks_in_quadrature() -> None:
    assert estimate_precision([(1, 3.0, 0.1), (2, 2.0, 0.1)], 7.0) == pytest.approx(0.5 / 7.0)
    assert estimate_precision([(1, 3.0, None)], 3.0) is None
    assert estimate_precision([(1, 3.0, 0.1)], None) is None


def test_times_the_store_knows_count_in_a_model_s_known_part(tmp_path: Path) -> None:
    """A brick timed anew in a model whose other bricks the store knows is a part of a known whole."""
    model = Path(shutil.copy(SAMPLE_MODELS / "mlp.onnx", tmp_path / "mlp.onnx"))
    run = DLBricksRun(Settings(granularity=2, dims={"batch": 1}), time.perf_counter)
    _, bricks = run.add_model(model, "mlp.onnx")
    first, *others = (brick.signature for brick in bricks)
    assert run.brick_precision(first, 1e-6, 0.02) == pytest.approx(0.02), "nothing else of the model is known"
    for other in others:
        run.know_time(other, 1e-4)
    assert run.brick_precision(first, 1e-6, 0.02) == LOOSEST
    assert run.brick_precision(first, 1e-4, 0.02) == pytest.approx(0.02 * math.sqrt(3), rel=0.05)
    assert run.brick_precision(first, 1e-6, 0.02, stored=False) == pytest.approx(0.02), "as far as the run has come"
    run.record_result(others[0], BrickResult(stats={"median": 1e-4}, provider="CPUExecutionProvider", reused=True))
    assert run.brick_precision(first, 1e-6, 0.02, stored=False) > 0.02, "a brick reused in this run counts"


def test_a_brick_s_precision_follows_the_call_cost_once_it_changes(tmp_path: Path) -> None:
    """Call costs are reckoned once per brick, and again for a call overhead measured or read later."""
    model = Path(shutil.copy(SAMPLE_MODELS / "mlp.onnx", tmp_path / "mlp.onnx"))
    overhead = CallOverhead(fixed_s=9e-6, per_input_s=1e-6, per_output_s=1e-6, timing_s=1e-7)
    runs = [DLBricksRun(Settings(granularity=2, dims={"batch": 1}), time.perf_counter) for _ in range(2)]
    signatures = [brick.signature for brick in runs[0].add_model(model, "mlp.onnx")[1]]
    runs[1].add_model(model, "mlp.onnx")
    late, known = runs
    known.assume_overhead(overhead)
    for run in runs:
        run.know_time(signatures[1], 1e-4)
    assert late.brick_precision(signatures[0], 1e-5, 0.02) != known.brick_precision(signatures[0], 1e-5, 0.02)
    late.assume_overhead(overhead)
    for signature in signatures:
        assert late.brick_precision(signature, 1e-5, 0.02) == known.brick_precision(signature, 1e-5, 0.02)


def test_bricks_not_timed_yet_count_at_their_float_flops_at_twice_the_peak(tmp_path: Path) -> None:
    """Once the run knows the machine's peak, a model's first brick is no longer the whole model known so far:
    its other bricks will add at least their FLOPs at twice the peak (integer multiply-adds left out)."""
    model = Path(shutil.copy(SAMPLE_MODELS / "tiny_resnet.onnx", tmp_path / "tiny_resnet.onnx"))
    run = DLBricksRun(Settings(granularity=1, dims={"batch": 1}), time.perf_counter)
    _, bricks = run.add_model(model, "tiny_resnet.onnx")
    first, *others = (brick.signature for brick in bricks)
    alone = run.brick_precision(first, 1e-6, 0.02)
    assert alone == pytest.approx(0.02) and run.least_work_s(others[0]) == 0.0, "no peak known: nothing counted"
    run.stored_peak = PEAK, "2026-01-01T00:00:00+00:00"
    for signature in run.bricks:
        flops = run.work[signature].flops or 0
        assert run.least_work_s(signature) == pytest.approx(flops / (PEAK_HEADROOM * PEAK.flops_per_s))
    least = sum(run.least_work_s(other) * run.plans[0].signatures[other] for other in others)
    assert least > 0
    assert run.brick_precision(first, 1e-6, 0.02) == pytest.approx(
        min(0.02 * math.sqrt((least + 1e-6) / 1e-6), LOOSEST)
    )
    run.work[first] = BrickWork("q", (LayerWork("MatMulInteger", 10**12, 0), LayerWork("Add", 4_000, 0)))
    assert run.least_work_s(first) == pytest.approx(4_000 / (PEAK_HEADROOM * PEAK.flops_per_s))


def test_a_brick_faster_than_the_peak_lowers_the_least_of_those_not_timed_yet(tmp_path: Path) -> None:
    """A peak read low (a slow stretch, a GEMM too small for many cores) would count bricks at more than they take:
    once a timed brick's float layers ran faster than it, the others count at that rate."""
    model = Path(shutil.copy(SAMPLE_MODELS / "tiny_resnet.onnx", tmp_path / "tiny_resnet.onnx"))
    run = DLBricksRun(Settings(granularity=1, dims={"batch": 1}), time.perf_counter)
    _, bricks = run.add_model(model, "tiny_resnet.onnx")
    heavy, other = sorted((brick.signature for brick in bricks), key=lambda s: -(run.work[s].flops or 0))[:2]
    run.stored_peak = PEAK, "2026-01-01T00:00:00+00:00"
    before = run.least_work_s(other)
    rate = 10 * PEAK.flops_per_s  # the heavy brick ran at ten times the peak
    seconds = (run.work[heavy].flops or 0) / rate
    run.record_result(heavy, BrickResult(stats={"median": seconds}, provider="CPUExecutionProvider"))
    assert run.least_work_s(other) == pytest.approx(before / 10)
    slow = (run.work[heavy].flops or 0) / PEAK.flops_per_s
    run.record_result(heavy, BrickResult(stats={"median": slow}, provider="CPUExecutionProvider"))
    assert run.least_work_s(other) == pytest.approx(before / 10), "the fastest rate seen holds"


def test_bricks_on_other_providers_than_the_cpu_s_count_at_their_calls_cost_only() -> None:
    """The peak, measured through the run's providers, need not bound what an accelerator's kernels reach."""
    run = DLBricksRun(
        Settings(granularity=1, providers=("CUDAExecutionProvider", "CPUExecutionProvider")), time.perf_counter
    )
    run.work["brick"] = BrickWork("b", (LayerWork("MatMul", 10**9, 0),))
    run.stored_peak = PEAK, "2026-01-01T00:00:00+00:00"
    assert run.least_work_s("brick") == 0.0


def test_the_peak_is_measured_once_before_the_first_timing_and_kept_for_the_report(
    pytester: pytest.Pytester, sample_models: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run that times bricks measures the peak anyway for its report: it does so before its first brick, once,
    and the report and the store take that one, the store with the first brick (a run killed later keeps it). A
    run that times nothing does not measure it."""
    measured: list[Settings] = []

    def measure(settings: Settings) -> Peak:
        measured.append(settings)
        return PEAK

    monkeypatch.setattr(engine, "measure_peak", measure)
    pytester.makeconftest(
        """
        from pathlib import Path

        def pytest_runtest_logfinish(nodeid):
            seen = Path("peak_after_first_brick.txt")
            if "brick[" in nodeid and not seen.exists():
                seen.write_text(str(any(Path("store").rglob("peak.json"))))
        """
    )
    args = ("--dlbricks-granularity=2", "--dlbricks-store=store")
    run_dlbricks(pytester, *args, "--benchmark-disable", "models/mlp.onnx").assert_outcomes(passed=3)
    assert not measured
    (pytester.path / "peak_after_first_brick.txt").unlink()
    run_dlbricks(pytester, *args, "--dlbricks-json=r.json", "models/mlp.onnx").assert_outcomes(passed=3)
    assert len(measured) == 1
    assert json.loads((pytester.path / "r.json").read_text())["peak"]["flops_per_s"] == PEAK.flops_per_s
    assert (pytester.path / "peak_after_first_brick.txt").read_text() == "True", "kept as the first brick is"
    run_dlbricks(pytester, *args, "models/tiny_resnet.onnx").assert_outcomes(passed=6)
    assert len(measured) == 1, "the store keeps it"


class _Item:
    """What :func:`items._budget_rounds` reads of a brick item: its benchmark mark and pytest's options."""

    def __init__(self, pytester: pytest.Pytester, *args: str) -> None:
        self.config = pytester.parseconfig(*args)
        self.marks: list[pytest.Mark] = [pytest.mark.benchmark(precision=0.02).mark]
        self.stash = pytest.Stash()

    def get_closest_marker(self, name: str) -> pytest.Mark | None:
        return self.marks[-1] if name == "benchmark" else None

    def add_marker(self, marker: pytest.MarkDecorator, append: bool = True) -> None:
        self.marks.append(marker.mark)


def _uses_counted_anew(run: DLBricksRun, signature: str, *, stored: bool) -> list[Use]:
    """A brick's uses counted from every brick of every model, as :meth:`DLBricksRun._uses` must find them."""
    overhead = run.overhead or NO_OVERHEAD
    uses = []
    for plan in run.plans:
        if signature not in plan.signatures:
            continue
        others, raw, floor = overhead.of(*plan.io), 0.0, 0.0
        for other, calls in plan.signatures.items():
            brick = run.bricks[other]
            call_cost = overhead.of_brick(len(brick.inputs), brick.output_count)
            result = run.results.get(other)
            time_s = float(result.stats["median"]) if result else run._known_times.get(other) if stored else None
            if other == signature:
                continue
            if time_s is None:
                floor += calls * call_cost
                others += calls * run.least_work_s(other)
                raw += calls * run.least_work_s(other)
            else:
                others += calls * max(time_s - call_cost, 0.0)
                raw += calls * time_s
        uses.append(Use(plan.signatures[signature], others, raw, floor))
    return uses


def test_the_models_tallies_follow_every_time_learnt(tmp_path: Path) -> None:
    """Sizing a brick reads its models' tallies, kept up to date as times become known and the call cost
    changes: the same uses as counting every brick of the models anew."""
    models = [Path(shutil.copy(SAMPLE_MODELS / name, tmp_path / name)) for name in ("mlp.onnx", "tiny_resnet.onnx")]
    run = DLBricksRun(Settings(granularity=1, dims={"batch": 1}), time.perf_counter)
    for model in models:
        run.add_model(model, model.name)
    run.add_model(models[0], "again.onnx")  # a second model of the same bricks: every brick used twice
    signatures = list(run.bricks)
    generator = random.Random(7)

    def agree() -> None:
        for signature in signatures:
            for stored in (True, False):
                counted = _uses_counted_anew(run, signature, stored=stored)
                tallied = run._uses(signature, stored=stored)
                assert len(tallied) == len(counted)
                for mine, expected in zip(tallied, counted):  # sums made in another order differ in their last bits
                    assert astuple(mine) == pytest.approx(astuple(expected), rel=1e-9, abs=1e-15)

    agree()
    for step, signature in enumerate(generator.sample(signatures, len(signatures))):
        seconds = generator.uniform(1e-6, 1e-3)
        if step % 3:
            run.know_time(signature, seconds)
        else:
            run.record_result(signature, BrickResult(stats={"median": seconds}, provider="CPUExecutionProvider"))
        if step == len(signatures) // 2:
            run.assume_overhead(CallOverhead(fixed_s=4e-6, per_input_s=1e-7, per_output_s=2e-7, timing_s=1e-7))
        if step == len(signatures) // 3:
            run.stored_peak = PEAK, "2026-01-01T00:00:00+00:00"
        agree()
    assert any(run.least_work_s(signature) for signature in signatures), "the peak was counted"
    assert run._fastest_flops_per_s > PEAK.flops_per_s, "and a brick faster than it, which the tallies followed"


class _Run:
    """A run whose time moves only when a brick is called: by ``untimed`` seconds preparing the call, which the run's
    clock leaves out, then by the brick's time."""

    def __init__(self, seconds: float, share: float = 0.0, untimed: float = 0.0) -> None:
        self.now, self.seconds, self.share, self.untimed, self.calls = 0.0, seconds, share, untimed, 0
        self.clock = PausableClock(lambda: self.now)

    def _prepare(self) -> None:
        self.now += self.untimed

    def call(self) -> None:
        self.calls += 1
        self.clock.untimed(self._prepare)
        self.now += self.seconds

    def brick_share(self, signature: str, seconds: float) -> float:
        return self.share

    def brick_precision(self, signature: str, seconds: float, target: float) -> float:
        return target


@pytest.mark.parametrize(("seconds", "calls"), [(10e-6, items.PROBE_CALLS), (items.PROBE_ENOUGH_S, 1), (0.05, 1)])
def test_a_brick_of_a_millisecond_or_more_is_probed_once(pytester: pytest.Pytester, seconds: float, calls: int) -> None:
    """Its one call's time is good enough for the budget; two more calls of every such brick cost a second."""
    run = _Run(seconds)
    items._budget_rounds(_Item(pytester), run, "brick", run.call)  # type: ignore[arg-type]
    assert run.calls == calls


@pytest.mark.parametrize(
    ("seconds", "share", "max_time", "min_rounds"),
    [
        (5e-6, items.SPAN_SHARE, 1.0, math.ceil(items.MIN_SPAN_S / 5e-6)),
        (5e-6, items.SPAN_SHARE, 0.004, math.ceil(0.004 / 5e-6)),
        (5e-6, items.SPAN_SHARE / 2, 1.0, None),
        (items.SHORT_CALL_S, 1.0, 1.0, None),
        (5e-6, 1.0, 5 * 5e-6, None),
    ],
    ids=["sizeable-part", "max-time-bounds-it", "small-part", "long-call", "span-no-longer-than-min-rounds"],
)
def test_a_microsecond_brick_of_a_sizeable_part_of_a_model_is_timed_over_a_span(
    pytester: pytest.Pytester, seconds: float, share: float, max_time: float, min_rounds: int | None
) -> None:
    """A millisecond-long slow stretch of the machine would move its median; spread over many, it is the usual
    time. Spanning the small parts too made four models' first run 2.3x longer, and long calls gain nothing."""
    item, run = _Item(pytester, f"--benchmark-max-time={max_time}"), _Run(seconds, share)
    items._budget_rounds(item, run, "brick", run.call)  # type: ignore[arg-type]
    assert item.marks[-1].kwargs.get("min_rounds") == min_rounds
    assert item.marks[-1].kwargs["precision"] == 0.02, "the precision still asked"


@pytest.mark.parametrize(("untimed", "max_time"), [(0.0, None), (75e-3, 0.25), (1e-6, 1.0 * 25e-3 / (25e-3 + 1e-6))])
def test_the_time_limit_holds_for_the_whole_call_not_only_its_timed_part(
    pytester: pytest.Pytester, untimed: float, max_time: float | None
) -> None:
    """pytest-benchmark sizes its rounds by the run's clock, which leaves out each call's preparation: a brick whose
    calls read a quarter of a gigabyte first ran 46 s for a limit of 1 s. It is handed the limit less the part of a
    call its clock leaves out; the user's limit is the one the brick is said to have run out of."""
    item, run = _Item(pytester, "--benchmark-max-time=1.0"), _Run(25e-3, untimed=untimed)
    items._budget_rounds(item, run, "brick", run.call)  # type: ignore[arg-type]
    assert item.marks[-1].kwargs.get("max_time") == pytest.approx(max_time)
    assert item.stash.get(items.TIME_LIMIT, None) == (None if max_time is None else 1.0)
