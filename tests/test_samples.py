"""Real inputs: sample inputs found beside a model or given by the hook, steering every brick, the reference run
and validation; bad sample data failing its model alone; synthetic runs of data-dependent models marked."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import onnx
import pytest
import tiny_models
from onnx import numpy_helper

from conftest import run_dlbricks
from pytest_dlbricks.core.errors import ModelError
from pytest_dlbricks.core.settings import Settings
from pytest_dlbricks.cut.bricks import BrickSpec
from pytest_dlbricks.cut.cutting import ModelPlan, plan_model
from pytest_dlbricks.cut.loading import load_model
from pytest_dlbricks.cut.samples import SampleInputs, find_samples
from pytest_dlbricks.timing.running import BrickRunner

SETTINGS = Settings(granularity=2, intra_op_threads=1)
#: Timing flags for runs whose estimates are compared: enough rounds for a 10x difference to show.
TIMING = ("--benchmark-min-rounds=5", "--benchmark-max-time=0.01", "--dlbricks-precision=off")


def write_test_data_set(model: Path, values: Mapping[str, np.ndarray], *, named: bool = True, number: int = 0) -> Path:
    """ONNX's layout: ``test_data_set_N/input_K.pb`` beside the model, one TensorProto per input."""
    folder = model.parent / f"test_data_set_{number}"
    folder.mkdir(exist_ok=True)
    for index, (name, value) in enumerate(values.items()):
        (folder / f"input_{index}.pb").write_bytes(
            numpy_helper.from_array(value, name if named else "").SerializeToString()
        )
    return folder


def write_npz(path: Path, values: Mapping[str, np.ndarray]) -> None:
    """A sidecar ``.npz`` (numpy's stubs take keyword arrays for its ``allow_pickle`` flag)."""
    np.savez(path, **values)  # type: ignore[arg-type]


def cut(path: Path, sample: SampleInputs | None, granularity: int = 2) -> ModelPlan:
    return plan_model(load_model(path, sample=sample, reach=granularity), granularity, path.name)


def bricks(plan: ModelPlan) -> list[BrickSpec]:
    return [brick for brick in plan.bricks if isinstance(brick, BrickSpec)]


def check_all(plan: ModelPlan) -> None:
    for brick in bricks(plan):
        BrickRunner(brick, SETTINGS).check()


def rate_values(sr: int) -> dict[str, np.ndarray]:
    return {"x": np.full((64, 256), 0.5, np.float32), "sr": np.array(sr, np.int64)}


# -- Finding and reading samples --------------------------------------------------------------------


def test_no_samples_is_none_and_npz_wins_over_test_data_set(tmp_path: Path) -> None:
    model = tiny_models.rate_switch(tmp_path)
    assert find_samples(model) is None
    write_test_data_set(model, rate_values(16000), named=False)
    found = find_samples(model)
    assert found is not None and found.source == "test_data_set_0" and set(found.values) == {"#0", "#1"}
    write_npz(model.with_suffix(".npz"), rate_values(8000))
    found = find_samples(model)
    assert found is not None and found.source == "vad.npz" and int(found.values["sr"]) == 8000


def test_unnamed_tensors_feed_the_inputs_in_order(tmp_path: Path) -> None:
    model = tiny_models.rate_switch(tmp_path)
    write_test_data_set(model, rate_values(16000), named=False)
    graph = load_model(model, sample=find_samples(model))
    assert int(graph.kept_values["sr"]) == 16000


@pytest.mark.parametrize(
    ("values", "cause"),
    [
        ({"x": np.ones((64, 256), np.float32), "rate_hz": np.array(1)}, "'rate_hz' in vad.npz is not an input"),
        ({"x": np.ones((64, 256), np.float64)}, "'x' in vad.npz holds float64 values, but the model takes float"),
        ({"x": np.ones((64, 256, 1), np.float32)}, "'x' in vad.npz has shape [64, 256, 1], but the model takes"),
        ({"x": np.ones((32, 256), np.float32)}, "'x' in vad.npz has shape [32, 256]"),
    ],
)
def test_bad_sample_values_name_the_file_and_the_input(tmp_path: Path, values: dict, cause: str) -> None:
    model = tiny_models.rate_switch(tmp_path)
    write_npz(model.with_suffix(".npz"), values)
    with pytest.raises(ModelError) as error:
        load_model(model, sample=find_samples(model))
    assert cause in error.value.cause


def test_unreadable_outside_and_oversized_sample_files_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "here").mkdir()
    model = tiny_models.rate_switch(tmp_path / "here")
    model.with_suffix(".npz").write_bytes(b"not a zip")
    with pytest.raises(ModelError, match=r"vad\.npz cannot be read as an \.npz"):
        find_samples(model)
    model.with_suffix(".npz").unlink()
    folder = write_test_data_set(model, rate_values(16000))
    (folder / "input_1.pb").write_bytes(b"\xff\xff\xff")
    with pytest.raises(ModelError, match=r"test_data_set_0/input_1\.pb is not a readable TensorProto"):
        find_samples(model)
    outside = tmp_path / "elsewhere.pb"
    outside.write_bytes(numpy_helper.from_array(np.array(1, np.int64), "sr").SerializeToString())
    (folder / "input_1.pb").unlink()
    os.symlink(outside, folder / "input_1.pb")
    with pytest.raises(ModelError, match=r"input_1\.pb lies outside the model's folder"):
        find_samples(model)
    (folder / "input_1.pb").unlink()
    external = numpy_helper.from_array(np.array(1, np.int64), "sr")
    external.data_location = onnx.TensorProto.EXTERNAL
    external.external_data.add(key="location", value="sr.bin")
    external.ClearField("raw_data")
    (folder / "input_1.pb").write_bytes(external.SerializeToString())
    with pytest.raises(ModelError, match=r"input_1\.pb keeps its values in another file; write them in it"):
        find_samples(model)
    write_test_data_set(model, rate_values(16000))
    monkeypatch.setattr("pytest_dlbricks.cut.samples.memory_limit", lambda: 1000)
    with pytest.raises(
        ModelError, match=r"file test_data_set_0/input_0\.pb holds 64\.0 KiB, more than the 1000 B memory limit"
    ):
        find_samples(model)


# -- Samples steer the bricks -------------------------------------------------------------------------


def test_the_if_branch_follows_the_sample(tmp_path: Path) -> None:
    model = tiny_models.rate_switch(tmp_path)
    plans = {}
    for sr in (16000, 8000):
        plans[sr] = plan = cut(model, SampleInputs("s", rate_values(sr), {"x": "s", "sr": "s"}), granularity=1)
        check_all(plan)
        assert plan.data_dependent == ("If",)
        (condition,) = (b for b in bricks(plan) if b.ops == ("If",))
        assert [bool(value) for value in condition.values.values() if value.dtype == bool] == [sr == 16000]
    assert set(plans[16000].signatures).isdisjoint(plans[8000].signatures)


def test_a_string_input_runs_on_its_sample_and_sizes_its_dimension(tmp_path: Path) -> None:
    model = tiny_models.word_lookup(tmp_path)
    with pytest.raises(ModelError, match=r"'words' is a tensor of string\[1\].*give it sample inputs"):
        load_model(model)
    words = np.array([f"w{index % 70}" for index in range(40)])
    np.savez(model.with_suffix(".npz"), words=words)
    graph = load_model(model, sample=find_samples(model))
    assert graph.specs["y"].shape == (40, 128) and graph.guessed_dims == {}
    assert list(graph.kept_values["words"]) == list(words)
    assert graph.sampled_dims == {"n": 40}, "the size the sample gave, which the model's point records"
    check_all(plan_model(graph, 1, model.name))


def test_output_sizes_follow_the_data_at_every_granularity(tmp_path: Path) -> None:
    model = tiny_models.kept_rows(tmp_path)
    for granularity in (1, 2, 3):
        for kept in (10, 200):
            x = np.zeros(256, np.float32)
            x[:kept] = 1.0
            plan = cut(model, SampleInputs("s", {"x": x}, {"x": "s"}), granularity)
            check_all(plan)  # a brick given synthetic x would keep all 256 rows
            matmul = next(b for b in bricks(plan) if "MatMul" in b.ops)
            assert matmul.outputs[-1][1].shape == (kept, 256)


def test_constant_float_scales_keep_their_values(tmp_path: Path) -> None:
    """Resize's float scales are weights that decide a shape: bricks keep them, whatever the granularity."""
    for then in ("Concat", "Conv"):
        model = tiny_models.constant_scales(tmp_path, then=then)
        for granularity in (1, 2, 3):
            plan = cut(model, None, granularity)
            check_all(plan)
            resize = next(b for b in bricks(plan) if "Resize" in b.ops)
            assert any(list(value) == [1, 1, 2, 2] for value in resize.values.values())


# -- End to end ------------------------------------------------------------------------------------


def estimate(pytester: pytest.Pytester, *args: str) -> dict:
    report = pytester.path / "report.json"
    result = run_dlbricks(
        pytester, "--dlbricks-granularity=2", f"--dlbricks-json={report}", *args, dims=(), timing=TIMING
    )
    assert result.ret == 0, result.stdout.str()
    return json.loads(report.read_text())


def only_model(report: dict) -> dict:
    (model,) = report["models"]
    assert model["complete"], model
    return model


def test_the_estimate_follows_the_sample_data(pytester: pytest.Pytester) -> None:
    """sr = 16000 picks the branch of 10 MatMuls, sr = 8000 the one of 1: the estimates say so."""
    model = tiny_models.rate_switch(pytester.path)
    write_test_data_set(model, rate_values(16000))
    heavy = only_model(estimate(pytester))
    write_npz(model.with_suffix(".npz"), rate_values(8000))
    light = only_model(estimate(pytester))
    assert (heavy["inputs"], light["inputs"]) == ("test_data_set_0", "vad.npz")
    # Ten times the work, timed: twice is a margin a loaded machine keeps (at four, one run under load fell short).
    assert heavy["sequential_s"] > 2 * light["sequential_s"], (heavy["sequential_s"], light["sequential_s"])


def test_the_hook_wins_and_data_dependent_sizes_follow_it(pytester: pytest.Pytester) -> None:
    model = tiny_models.kept_rows(pytester.path)
    write_test_data_set(model, {"x": np.ones(256, np.float32)})
    pytester.makeconftest(
        """
        import numpy as np

        def pytest_dlbricks_model_inputs(path, config):
            if path.name == "detector.onnx":
                x = np.zeros(256, np.float32)
                x[:int(config.getoption("keep"))] = 1
                return {"x": x}

        def pytest_addoption(parser):
            parser.addoption("--keep", default="256")
        """
    )
    few = only_model(estimate(pytester, "--keep=8"))
    many = only_model(estimate(pytester, "--keep=256"))
    assert few["inputs"] == many["inputs"] == "pytest_dlbricks_model_inputs"
    # The rows kept follow the hook's data: 32 times the work, counted from the shapes it gave.
    assert many["flops"] > 30 * few["flops"], (many["flops"], few["flops"])
    # Timed, several times longer on a quiet machine; on one shared with other tests, longer at the least.
    assert many["sequential_s"] > few["sequential_s"], (many["sequential_s"], few["sequential_s"])


def test_a_string_model_is_estimated_on_its_sample(pytester: pytest.Pytester) -> None:
    model = tiny_models.word_lookup(pytester.path)
    np.savez(model.with_suffix(".npz"), words=np.array(["w1", "w2", "w3"]))
    found = only_model(estimate(pytester))
    assert found["inputs"] == "words.npz" and found["guessed_dims"] == {}
    assert found["point"] == {"n": 3, "dtype": "fp32"}, "the point it ran at: its sample's size"
    again = only_model(estimate(pytester))  # its plan read back from the store
    assert again["point"] == found["point"]


def test_bad_samples_fail_their_model_alone(pytester: pytest.Pytester) -> None:
    bad = tiny_models.rate_switch(pytester.mkdir("bad"))
    np.savez(bad.with_suffix(".npz"), x=np.ones((64, 256), np.float32), rate=np.array(1))
    tiny_models.constant_scales(pytester.mkdir("good"))
    report = pytester.path / "report.json"
    result = run_dlbricks(pytester, "--dlbricks-granularity=2", f"--dlbricks-json={report}", dims=())
    result.stdout.fnmatch_lines(["*bad/vad.onnx: sample input 'rate' in vad.npz is not an input of the model*"])
    outcomes = result.parseoutcomes()
    assert outcomes["errors"] == 1 and outcomes["passed"] >= 1
    models = {Path(model["path"]).parent.name: model for model in json.loads(report.read_text())["models"]}
    assert models["good"]["complete"] and "'rate' in vad.npz" in models["bad"]["error"]


def test_a_data_dependent_model_on_synthetic_inputs_is_marked(pytester: pytest.Pytester) -> None:
    tiny_models.rate_switch(pytester.path)
    report, page = pytester.path / "report.json", pytester.path / "report.html"
    result = run_dlbricks(
        pytester, "--dlbricks-granularity=2", f"--dlbricks-json={report}", f"--dlbricks-html={page}", dims=()
    )
    result.stdout.fnmatch_lines(
        ["*vad.onnx * synthetic[*] *", "[*] synthetic inputs, but data steers the work of *vad.onnx (If): give sample*"]
    )
    model = only_model(json.loads(report.read_text()))
    assert (model["inputs"], model["data_dependent_ops"]) == ("synthetic", ["If"])
    assert '<span class="warn">synthetic, but If depends on data: give sample inputs</span>' in page.read_text()


def test_validation_times_the_users_model_on_the_sample(pytester: pytest.Pytester) -> None:
    """Resize's float scales (a weight that decides a shape) and sample inputs: the whole model runs as written."""
    model = tiny_models.constant_scales(pytester.path)
    write_test_data_set(model, {"x": np.ones((1, 8, 16, 16), np.float32), "skip": np.ones((1, 8, 32, 32), np.float32)})
    report = pytester.path / "report.json"
    result = run_dlbricks(
        pytester, "--dlbricks-granularity=3", "--dlbricks-validate", f"--dlbricks-json={report}", dims=()
    )
    result.assert_outcomes(passed=2)
    found = only_model(json.loads(report.read_text()))
    assert found["measured_s"] > 0 and found["inputs"] == "test_data_set_0"


def test_an_export_withholds_activations_unless_asked(pytester: pytest.Pytester) -> None:
    model = tiny_models.kept_rows(pytester.mkdir("models"))
    x = np.zeros(256, np.float32)
    x[:10] = 1
    np.savez(model.with_suffix(".npz"), x=x)
    for asked in ((), ("--dlbricks-export-activations",)):
        suite = pytester.path / f"suite{len(asked)}"
        run_dlbricks(pytester, "models", "--dlbricks-granularity=2", f"--dlbricks-export={suite}", *asked, dims=())
        entries = json.loads((suite / "manifest.json").read_text())["bricks"]
        carried = [value for entry in entries for value in entry["kept_values"] if value["kind"] == "activation"]
        withheld = [name for entry in entries for name in entry["withheld_values"]]
        assert (bool(carried), bool(withheld)) == ((True, False) if asked else (False, True))
        for entry in entries:
            kept = {initializer.name for initializer in onnx.load(str(suite / entry["file"])).graph.initializer}
            assert set(entry["withheld_values"]).isdisjoint(kept)
