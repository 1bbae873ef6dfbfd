"""A folder of broken, hostile and unusual models beside a good one, run as a user runs it.

Each bad file must fail alone, as one item whose message names the file and the cause; every good
model must still be benchmarked and reported; pytest must exit non-zero and show no traceback.
"""

from __future__ import annotations

import fnmatch
import json
import os
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable
from pathlib import Path
from typing import Any

import onnx
import pytest
import tiny_models
from hostile_models import write_corpus
from test_plugin import read_report, run

from conftest import SAMPLE_MODELS
from pytest_dlbricks.core import runtime
from pytest_dlbricks.wiring import engine


def junit_items(path: Path) -> dict[str, tuple[str, str]]:
    """Each item's id, outcome (passed, failure or error) and message, from pytest's ``--junitxml`` file.

    junit names an item ``models/x.onnx::load`` by the class name ``models.x.onnx`` and the name
    ``load``; the corpus' file names hold no other dot, so the id is rebuilt from both.
    """
    items = {}
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        folder_and_stem = case.attrib["classname"].removesuffix(".onnx").replace(".", "/")
        problems = [child for child in case if child.tag in ("failure", "error")]
        outcome, message = (problems[0].tag, (problems[0].text or "").strip()) if problems else ("passed", "")
        items[f"{folder_and_stem}.onnx::{case.attrib['name']}"] = (outcome, message)
    return items


@pytest.mark.parametrize("cut", ["optimized", "original"])
def test_each_bad_model_fails_alone_with_its_cause(
    pytester: pytest.Pytester, copy_models: Callable[..., list[Path]], monkeypatch: pytest.MonkeyPatch, cut: str
) -> None:
    monkeypatch.setattr(runtime, "RUN_TIME_LIMIT_S", 0.5)  # for the Loops that never end
    cases = write_corpus(pytester.path / "models")
    copy_models(SAMPLE_MODELS / "mlp.onnx")
    # Warnings as errors: a failing brick must not add pytest-benchmark's "fixture not used" warning.
    options = ["-W", "error::pytest.PytestWarning", "--dlbricks-json=r.json", "--junitxml=junit.xml"]
    result = run(pytester, "--dlbricks-granularity=1", f"--dlbricks-cut={cut}", *options, "models")

    assert result.ret == pytest.ExitCode.TESTS_FAILED
    output = result.stdout.str()
    assert "Traceback" not in output
    assert not [line for line in result.stdout.lines if line.startswith("E  ")], "pytest showed an exception"
    items = junit_items(pytester.path / "junit.xml")
    unexplained = {nodeid for nodeid, (outcome, _) in items.items() if outcome != "passed"}
    for case in cases:
        file = f"models/{case.name}.onnx"
        own = {nodeid: item for nodeid, item in items.items() if nodeid.startswith(f"{file}::")}
        # A failing brick is listed under the first model that uses it, so look for its users too.
        bad = {
            nodeid: item
            for nodeid, item in items.items()
            if item[0] != "passed" and (nodeid.startswith(f"{file}::") or f"(used by {file})" in item[1])
        }
        unexplained -= set(bad)
        if case.outcome_of(cut) == "load":
            assert own == bad and list(bad) == [f"{file}::load"], case.name
            assert bad[f"{file}::load"][0] == "error"
            assert fnmatch.fnmatchcase(bad[f"{file}::load"][1], f"{file}: {case.cause}"), (case.name, bad)
        elif case.outcome_of(cut) == "brick":
            ((nodeid, (outcome, message)),) = bad.items()
            assert "::brick[" in nodeid and outcome == "failure", case.name
            assert fnmatch.fnmatchcase(message, f"brick * (used by {file}): {case.cause}"), (case.name, message)
        else:
            assert not bad, case.name
    assert not unexplained

    report = read_report(pytester.path / "r.json")
    models = {model["path"]: model for model in report["models"]}
    assert len(models) == len(cases) + 1
    good = [models["models/mlp.onnx"]] + [models[f"models/{c.name}.onnx"] for c in cases if c.outcome_of(cut) == "runs"]
    assert all(model["complete"] and model["sequential_s"] > 0 for model in good)
    for case in cases:
        model = models[f"models/{case.name}.onnx"]
        assert model["complete"] is False or case.outcome_of(cut) == "runs", case.name
        assert ("error" in model) == (case.outcome_of(cut) == "load"), case.name
    result.stdout.fnmatch_lines(["models/mlp.onnx * yes", "models/cycle.onnx * error"])


def test_the_corpus_is_as_large_as_promised(tmp_path: Path) -> None:
    cases = write_corpus(tmp_path)
    assert len({case.name for case in cases}) == len(cases)
    assert sum(case.outcome != "runs" for case in cases) >= 30
    assert all(case.path(tmp_path).is_file() for case in cases)


def test_a_model_file_name_that_is_not_utf8_is_reported_readably(
    pytester: pytest.Pytester, copy_models: Callable[..., list[Path]]
) -> None:
    (path,) = copy_models(SAMPLE_MODELS / "mlp.onnx")
    path.rename(path.with_name(os.fsdecode(b"ml\xffp.onnx")))
    result = run(pytester, "--dlbricks-granularity=3", "--dlbricks-json=r.json", "--dlbricks-html=r.html", "models")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines([r"models/ml\xffp.onnx * yes"])
    report = json.loads((pytester.path / "r.json").read_bytes().decode("utf-8"), parse_constant=_refuse)
    assert [model["path"] for model in report["models"]] == [r"models/ml\xffp.onnx"]
    assert r"models/ml\xffp.onnx" in (pytester.path / "r.html").read_text(encoding="utf-8")


def _refuse(constant: str) -> None:
    raise ValueError(f"{constant} is not JSON")


def test_an_image_size_no_onnx_dimension_holds_is_ignored(
    pytester: pytest.Pytester, copy_models: Callable[..., list[Path]]
) -> None:
    """Ultralytics' ``imgsz`` metadata read as the sizes of ``height`` and ``width``: a size beyond 64 bits
    failed the collection, and with it every model beside."""
    copy_models(SAMPLE_MODELS / "mlp.onnx")
    node = onnx.helper.make_node("Relu", ["x"], ["y"])
    model = tiny_models.finish(
        [node], [tiny_models.tensor("x", [1, "height", "width"])], [tiny_models.tensor("y", [1, "height", "width"])]
    )
    model.metadata_props.add(key="imgsz", value="[99999999999999999999, 640]")
    onnx.save(model, pytester.path / "models" / "huge_imgsz.onnx")
    quiet = ("-W", "ignore::pytest_dlbricks.wiring.warning_types.DLBricksWarning")  # sizes left at 1 are warned of
    result = run(pytester, *quiet, "--dlbricks-granularity=2", "--dlbricks-store=none", "models", dims=())
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines(["models/huge_imgsz.onnx * yes *height, width", "models/mlp.onnx * yes*"])


def test_an_error_no_check_foresaw_fails_its_model_alone(
    pytester: pytest.Pytester, copy_models: Callable[..., list[Path]], monkeypatch: pytest.MonkeyPatch
) -> None:
    copy_models(SAMPLE_MODELS / "mlp.onnx", SAMPLE_MODELS / "tiny_resnet.onnx")
    add_model = engine.DLBricksRun._add_model

    def unforeseen(self: engine.DLBricksRun, path: Path, *args: Any) -> Any:
        if path.name == "tiny_resnet.onnx":
            raise RecursionError("maximum recursion depth exceeded")
        return add_model(self, path, *args)

    monkeypatch.setattr(engine.DLBricksRun, "_add_model", unforeseen)
    result = run(pytester, "--dlbricks-granularity=2", "--dlbricks-store=none", "--dlbricks-json=r.json", "models")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    cause = "cannot be read (RecursionError: maximum recursion depth exceeded)"
    result.stdout.fnmatch_lines([f"models/tiny_resnet.onnx: {cause}"])
    result.stdout.fnmatch_lines(["models/mlp.onnx * yes*"])
    models = {model["path"]: model for model in read_report(pytester.path / "r.json")["models"]}
    assert models["models/tiny_resnet.onnx"]["error"] == cause and models["models/mlp.onnx"]["complete"]
