"""The run's output as a user reads it: lines that fit the terminal, a verdict at the end, progress on a terminal."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from conftest import SAMPLE_MODELS, run_dlbricks
from pytest_dlbricks.wiring import engine  # imported before pytester's runs, which patch it

#: pytest-benchmark's table, from its title rule to its legend's last line: its own lines, sized to its columns.
BENCHMARK_TABLE = re.compile(r"^-+ benchmark.*-+$")
LEGEND_END = "  OPS: Operations Per Second, computed as 1 / Mean"


def run_lines(output: list[str]) -> list[str]:
    """The lines of a run after pytest's header (whose paths and plugin settings are pytest's own), without
    pytest-benchmark's tables."""
    lines = output[next(i for i, line in enumerate(output) if line.startswith("collected")) :]
    kept, in_table = [], False
    for line in lines:
        if BENCHMARK_TABLE.match(line):
            in_table = True
        if not in_table:
            kept.append(line)
        if line == LEGEND_END:
            in_table = False
    return kept


def test_no_line_is_wider_than_the_terminal(
    pytester: pytest.Pytester, sample_models: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    result = run_dlbricks(pytester, "--dlbricks-granularity=2", "--dlbricks-json=report.json")
    report = json.loads((pytester.path / "report.json").read_text())
    # One item a distinct brick: how many, the fusions of the processor at hand decide (43 on one, 45 on another).
    result.assert_outcomes(passed=report["summary"]["distinct_bricks"])
    lines = run_lines(result.outlines)
    assert any(line.startswith("dlbricks verdict:") for line in lines), "the plugin's lines are checked"
    wide = [line for line in lines if len(line) > 100]
    assert not wide, "\n".join(wide)
    # The cell's explanation follows the table, and the JSON keeps the operators.
    result.stdout.fnmatch_lines(["*_rnn.onnx * synthetic[*] *", "[*] synthetic inputs, but data steers the work*"])
    rnn = next(model for model in report["models"] if model["path"].endswith("tiny_rnn.onnx"))
    assert rnn["data_dependent_ops"] == ["Loop"]


class _AnyNumber:
    """Equal to any non-negative number: a duration the test cannot know."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, int | float) and not isinstance(other, bool) and other >= 0


ANY_NUMBER = _AnyNumber()


def test_verbose_cells_say_it_all(pytester: pytest.Pytester, sample_models: list[Path]) -> None:
    result = run_dlbricks(pytester, "--dlbricks-granularity=2", "-v", "--dlbricks-store=none")
    result.stdout.fnmatch_lines(["models/tiny_rnn.onnx * synthetic, but Loop depends on data: give sample inputs *"])


def test_every_run_with_estimates_ends_with_its_verdict(pytester: pytest.Pytester, sample_models: list[Path]) -> None:
    result = run_dlbricks(pytester, "--dlbricks-granularity=2", "--dlbricks-json=report.json")
    verdict = json.loads((pytester.path / "report.json").read_text())["verdict"]
    assert verdict["trusted"] is True  # the tests' timing thread keeps its core (see conftest)
    assert verdict["margin"] == pytest.approx(sum(part**2 for part in verdict["sources"].values()) ** 0.5), (
        "the sources add in quadrature"
    )
    assert verdict["sources"]["bricks"] > 0
    assert verdict["advice"] == [] or verdict["advice"][-1] == "run again"
    last = [line for line in result.outlines if line.strip()][-2]  # before pytest's closing line
    assert last.startswith(f"dlbricks verdict: estimates hold within +-{max(verdict['margin'], 0.01):.0%}")


def test_a_validated_run_s_verdict_counts_its_bricks_timed_again(
    pytester: pytest.Pytester, sample_models: list[Path]
) -> None:
    """The item estimates against the paired rounds' (the same bricks timed again beside each model) measure how
    far the same command's estimates move, in a run too short for the speed trace; the store keeps it as that
    run's speed, for the runs that reuse its bricks."""
    args = ("--dlbricks-granularity=2", "--dlbricks-json=report.json", "models/mlp.onnx", "models/tiny_resnet.onnx")
    result = run_dlbricks(pytester, "--dlbricks-validate", *args)
    report = json.loads((pytester.path / "report.json").read_text())
    drifts = [model["estimate_drift"] for model in report["models"]]
    assert report["verdict"]["sources"]["drift"] == pytest.approx(max(max(d, 1 / d) - 1 for d in drifts))
    said = " ".join(result.stdout.str().split())  # the line as read, wherever the terminal wrapped it
    drift = report["verdict"]["sources"]["drift"]
    path, moved = report["verdict"]["widest_drift"]
    assert drift == pytest.approx(max(moved, 1 / moved) - 1) and path in {model["path"] for model in report["models"]}
    assert drift < 0.005 or (
        f"bricks timed again +-{drift:.0%}" in said and f"widest move when timed again: {path} ({moved:.2f}x)" in said
    ), "a part under 0.5% goes unsaid"
    run_dlbricks(pytester, *args)
    rerun = json.loads((pytester.path / "report.json").read_text())
    assert rerun["summary"]["reused_from"]["speed"] >= report["verdict"]["sources"]["drift"] - 1e-12
    assert report["summary"]["timed_again"] is None, "validation's paired rounds time the bricks again instead"


def test_a_run_times_its_bricks_again_at_its_end(
    pytester: pytest.Pytester, sample_models: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without validation, each brick the run timed is timed once more at its end: its verdict says how far the
    models' estimates moved, from the model that moved furthest."""
    monkeypatch.setattr(engine, "AGAIN_SHARE", 100.0)  # a run of the tests' few rounds leaves it no time
    args = ("--dlbricks-granularity=2", "--dlbricks-store=none", "--dlbricks-json=report.json")
    result = run_dlbricks(pytester, *args, "--dlbricks-html=report.html", "models/mlp.onnx", "models/tiny_resnet.onnx")
    report = json.loads((pytester.path / "report.json").read_text())
    timed = report["summary"]["measured_bricks"]
    assert report["summary"]["timed_again"] == {"bricks": timed, "timed": timed, "models": 2, "seconds": ANY_NUMBER}
    drifts = {model["path"]: model["estimate_drift"] for model in report["models"]}
    # Items of the tests' two quick rounds read cold calls: how far they lie from the bricks timed again is no test.
    assert all(math.isfinite(drift) and drift > 0 for drift in drifts.values()), drifts
    path, moved = report["verdict"]["widest_drift"]
    assert moved == drifts[path] and report["verdict"]["sources"]["drift"] == pytest.approx(
        max(max(d, 1 / d) - 1 for d in drifts.values())
    )
    said = " ".join(result.stdout.str().split())
    assert moved == pytest.approx(1, abs=0.005) or f"widest move when timed again: {path}" in said
    assert "accuracy" not in said.lower(), "no model was validated"
    # Each model's own margin: its own move, with the parts every model shares; none wider than the run's.
    own = report["verdict"]["models"]
    assert set(own) == set(drifts) and all(0 < margin <= report["verdict"]["margin"] + 1e-12 for margin in own.values())
    assert own[path] >= max(moved, 1 / moved) - 1 - 1e-12, "the widest mover's margin holds its move"
    page = (pytester.path / "report.html").read_text()
    shown = {f"+-{max(margin, 0.01):.0%}" for margin in own.values()}
    assert "Within" in page and all(cell in page for cell in shown), "the HTML table gives them too"
    assert report["accuracy"] is None


def test_timing_again_keeps_to_its_share_of_the_run_from_the_smallest_model(
    pytester: pytest.Pytester, sample_models: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    args = ("--dlbricks-granularity=2", "--dlbricks-store=none", "--dlbricks-json=report.json")
    models = ("models/mlp.onnx", "models/tiny_inception.onnx")
    monkeypatch.setattr(engine, "AGAIN_SHARE", 0.0)
    run_dlbricks(pytester, *args, *models)
    report = json.loads((pytester.path / "report.json").read_text())
    assert report["summary"]["timed_again"] is None and "drift" not in report["verdict"]["sources"]
    # Unbounded, the smallest model's bricks come first: models of microseconds move furthest between runs.
    order: list[str] = []

    def recorded(runner: Any) -> tuple[float, ...]:
        order.append(runner.brick.signature)
        return (1e-5,) * 3

    monkeypatch.setattr(engine, "AGAIN_SHARE", 100.0)
    monkeypatch.setattr(engine, "time_again", recorded)
    run_dlbricks(pytester, *args, *models)
    report = json.loads((pytester.path / "report.json").read_text())
    # The smaller by this run's own brick times (a loaded machine can put the 40x apart the other way round).
    times = {brick["signature"]: brick["time_s"] for brick in report["bricks"]}
    windows = {model["path"]: model["composition"]["bricks"] for model in report["models"]}
    smallest = min(windows, key=lambda path: sum(times[signature] for signature, *_ in windows[path]))
    first = {brick["signature"] for brick in report["bricks"] if smallest in brick["models"]}
    assert first and set(order[: len(first)]) == first
    assert len(order) == len(set(order)) == report["summary"]["measured_bricks"]


def test_nothing_is_timed_again_where_nothing_was_timed(pytester: pytest.Pytester, sample_models: list[Path]) -> None:
    args = ("--dlbricks-granularity=2", "--dlbricks-json=report.json", "models/mlp.onnx")
    run_dlbricks(pytester, *args, "--benchmark-disable")
    assert json.loads((pytester.path / "report.json").read_text())["summary"]["timed_again"] is None
    run_dlbricks(pytester, *args)
    run_dlbricks(pytester, *args)  # every brick reused from the store
    report = json.loads((pytester.path / "report.json").read_text())
    assert report["summary"]["timed_again"] is None and "estimate_drift" not in report["models"][0]
    assert report["summary"]["reused_from"]["speed"] is not None, "the run that timed them says how far they moved"


def test_a_run_without_estimates_has_no_verdict(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain="def test_nothing():\n    pass\n")
    result = run_dlbricks(pytester, "--dlbricks-granularity=2")
    assert "dlbricks verdict" not in result.stdout.str()


def test_a_loaded_run_says_so_in_its_verdict(
    pytester: pytest.Pytester, sample_models: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A timing thread whose CPU clock runs at half the wall clock's pace: it was on its core half the time."""
    from pytest_dlbricks.timing import load
    from pytest_dlbricks.wiring import run_state

    class HalfTheTime(load.LoadMeter):
        def readings(self) -> load.Readings:
            return load.Readings(max(self.wall_s, 1.0), max(self.wall_s, 1.0) / 2, 3.5, 2)

    monkeypatch.setattr(run_state, "LoadMeter", HalfTheTime)
    result = run_dlbricks(pytester, "--dlbricks-granularity=2", "--dlbricks-json=report.json", "--dlbricks-store=none")
    result.stdout.fnmatch_lines(
        [
            "dlbricks verdict: estimates not trusted: the timing thread was on a core 50% of its rounds' time"
            " (load average 3.5 on 2 cores); to tighten: a quieter machine, *run again"
        ]
    )
    report = json.loads((pytester.path / "report.json").read_text())
    assert report["summary"]["load"]["core_share"] == 0.5 and not report["summary"]["load"]["trusted"]
    assert report["verdict"]["margin"] is None and report["verdict"]["trusted"] is False


def test_a_run_loaded_a_little_on_a_pool_of_threads_is_not_trusted(
    pytester: pytest.Pytester, sample_models: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A timing thread on its core 80% of the time on 2 cores, at onnxruntime's threads (one a core): a pool thread
    off its core holds up every parallel layer, so no margin (one thread keeps one: see test_verdict.py)."""
    from pytest_dlbricks.timing import load
    from pytest_dlbricks.wiring import run_state

    class MostOfTheTime(load.LoadMeter):
        def readings(self) -> load.Readings:
            return load.Readings(max(self.wall_s, 1.0), max(self.wall_s, 1.0) * 0.8, 2.5, 2)

    monkeypatch.setattr(run_state, "LoadMeter", MostOfTheTime)
    result = run_dlbricks(pytester, "--dlbricks-granularity=2", "--dlbricks-store=none")
    result.stdout.fnmatch_lines(
        [
            "dlbricks verdict: estimates not trusted: the timing thread was on a core 80% of its rounds' time"
            " (load average 2.5 on 2 cores), with 2 intra-op threads, whose layers wait for any of them that lost"
            " its core; to tighten: a quieter machine, one intra-op thread (--dlbricks-threads=1)*"
        ]
    )


def test_collection_names_each_model_on_a_terminal_only(
    pytester: pytest.Pytester, sample_models: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("CI", "BUILD_NUMBER"):
        monkeypatch.delenv(name, raising=False)
    args = ("--dlbricks-granularity=2", "--dlbricks-store=none", "--benchmark-disable")
    assert "loading and cutting" not in run_dlbricks(pytester, *args).stdout.str(), "not a terminal: quiet"
    pytester.makeconftest(
        """
        import pytest

        @pytest.hookimpl(trylast=True)
        def pytest_configure(config):
            config.pluginmanager.get_plugin("terminalreporter").isatty = lambda: True
        """
    )
    # Each line rewrites the one before (a carriage return, which the captured output splits lines at).
    run_dlbricks(pytester, *args).stdout.fnmatch_lines(
        [
            "*dlbricks: loading and cutting models/mlp.onnx (1 of 5, 4 left) *",
            "dlbricks: loading and cutting models/tiny_inception.onnx (2 of 5, 3 left) *",
            "dlbricks: loading and cutting models/transformer_block.onnx (5 of 5) *",
        ]
    )
    assert "loading and cutting" not in run_dlbricks(pytester, *args, "-q").stdout.str()
    monkeypatch.setenv("CI", "true")
    assert "loading and cutting" not in run_dlbricks(pytester, *args).stdout.str()


def test_models_given_outside_the_rootdir_are_named_by_their_path_from_it(pytester: pytest.Pytester) -> None:
    """pytest leaves the node id of a file given on the command line outside the rootdir empty: two such models
    would share one empty name in every table, and one's estimate be taken for the other's."""
    pytester.makeini("[pytest]\n")
    (pytester.path / "models").mkdir()
    shutil.copy(SAMPLE_MODELS / "mlp.onnx", pytester.path / "models")
    outside = pytester.path.parent / f"{pytester.path.name}-outside"
    for folder in ("a", "b"):
        (outside / folder).mkdir(parents=True)
        shutil.copy(SAMPLE_MODELS / "tiny_resnet.onnx", outside / folder)
    models = ["models/mlp.onnx", *(str(outside / folder / "tiny_resnet.onnx") for folder in ("a", "b"))]
    result = run_dlbricks(
        pytester, "--dlbricks-granularity=2", "--dlbricks-store=none", "--dlbricks-json=r.json", *models
    )
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    report = json.loads((pytester.path / "r.json").read_text())
    assert [model["path"] for model in report["models"]] == [
        "models/mlp.onnx",
        f"../{outside.name}/a/tiny_resnet.onnx",
        f"../{outside.name}/b/tiny_resnet.onnx",
    ]
    assert all(model["complete"] and model["sequential_s"] > 0 for model in report["models"])
