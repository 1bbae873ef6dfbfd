"""Unit tests of the renderers beyond the main table: the terminal's analysis and the HTML page."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from html import escape
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from test_analysis import analysed_report

from conftest import SAMPLE_MODELS, run_dlbricks
from pytest_dlbricks.rendering.accuracy_text import accuracy_lines
from pytest_dlbricks.rendering.executor_text import executor_line
from pytest_dlbricks.rendering.formatting import (
    fit_lines,
    format_flops,
    format_margin,
    format_rate,
    format_ratio,
    format_seconds,
    format_share,
    shorten_path,
)
from pytest_dlbricks.rendering.html import render_html
from pytest_dlbricks.rendering.html_charts import CALL, CALL_COLOUR, OP_COLOURS, OTHER_COLOUR, SHOWN_OP_TYPES, op_colour
from pytest_dlbricks.rendering.html_parts import LABEL_CHARS
from pytest_dlbricks.rendering.terminal import (
    describe_inputs,
    inputs_notes,
    parallel_estimated,
    progress_line,
    render_analysis,
    render_table,
    speed_line,
)

VOID = {"meta", "br", "wbr", "hr", "img", "input", "link"}
SVG_LEAVES = {"rect", "circle", "line"}


@pytest.fixture
def report(tmp_path: Path) -> dict[str, Any]:
    """chain.onnx (complete), loop_acc_None.onnx (complete, its Loop of unknown FLOPs), bad.onnx (failed)."""
    return analysed_report(tmp_path)


@pytest.mark.parametrize(
    ("flops", "text"),
    [(None, "-"), (0, "0 FLOP"), (812, "812 FLOP"), (999.6, "1.00 kFLOP"), (1_354_000, "1.35 MFLOP"),
     (99_950, "100 kFLOP"), (40.94e9, "40.9 GFLOP"), (2.1e12, "2.10 TFLOP")],
)  # fmt: skip
def test_format_flops_keeps_three_digits(flops: float | None, text: str) -> None:
    assert format_flops(flops) == text


def test_format_rate_and_share() -> None:
    assert [format_rate(r) for r in (None, 3.456e11, 8.352e9, 3.2e7, 0)] == ["-", "345.6", "8.35", "0.032", "0"]
    assert [format_share(f) for f in (None, 0.0, 0.00032, 0.005, 0.0123, 0.0999, 0.1, 0.456, 1.5)] == [
        "-", "0%", "0.032%", "0.5%", "1.2%", "10%", "10%", "46%", "150%",
    ]  # fmt: skip


# -- terminal ------------------------------------------------------------------------------------


def test_default_analysis_is_one_line(report: dict[str, Any]) -> None:
    text = render_analysis(report, verbose=False)
    # chain: 3 x (Conv + Relu) FLOPs over 15 us; loop: 64 FLOPs over the 2 us of known bricks; peak 100 GFLOP/s.
    assert text == (
        "dlbricks: peak 100.0 GFLOP/s (GEMM), 10.0 GB/s; models reach 0.032% to 8.4% of the peak;"
        " 37% of the time is in bricks with unknown FLOPs (-v: load times, operator types)"
    )


def test_no_peak_no_line(report: dict[str, Any]) -> None:
    assert render_analysis({**report, "peak": None}, verbose=False) == ""


def test_verbose_analysis_breaks_each_model_down(report: dict[str, Any]) -> None:
    lines = render_analysis(report, verbose=True).splitlines()
    assert lines[0].startswith("dlbricks: peak 100.0 GFLOP/s") and "(-v" not in lines[0]
    header, rule, chain, loop = lines[2:6]
    assert header.split() == ["Model", "Load", "Sequential", "FLOPs", "GFLOP/s", "Of", "peak", "Unknown", "FLOPs"]
    assert set(rule) == {"-"}
    assert chain.split() == ["chain.onnx", "2.00", "ms", "15.0", "us", "125", "kFLOP", "8.35", "8.4%", "-"]
    assert loop.split() == [
        "loop_acc_None.onnx",
        "-",
        "12.0",
        "us",
        "64",
        "FLOP",
        "0.032",
        "0.032%",
        "10.0",
        "us",
        "(83%)",
    ]
    assert "bad.onnx" not in "\n".join(lines), "a failed model has nothing to break down"
    assert lines[7:10] == [
        "Time by operator type:",
        "  chain.onnx          Conv 80%, Relu 20%",
        "  loop_acc_None.onnx  Loop 83%, Relu 8.3%, Sigmoid 8.3%",
    ]
    assert lines[11] == "Top bricks by time in the model:"
    assert lines[12].startswith("  chain.onnx          Conv-") and " x3 80%, Relu-" in lines[12]
    assert lines[13].startswith("  loop_acc_None.onnx  Loop-")


def test_verbose_lists_at_most_five_op_types_then_the_rest(report: dict[str, Any]) -> None:
    chain = report["models"][0]
    chain["op_time_s"] = {f"Op{i}": float(10 - i) for i in range(8)}
    lines = render_analysis(report, verbose=True).splitlines()
    line = next(line for line in lines if line.startswith("  chain.onnx") and "Op0" in line)
    assert line.endswith("Op0 19%, Op1 17%, Op2 15%, Op3 13%, Op4 12%, 3 other 23%")


def test_an_incomplete_model_has_a_row_but_no_breakdown(report: dict[str, Any]) -> None:
    chain = report["models"][0]
    chain.update(complete=False, sequential_s=None, flops_per_s=None, peak_fraction=None, op_time_s=None)
    chain.update(top_bricks=None, unknown_flops_time_s=None)
    text = render_analysis(report, verbose=True)
    assert "chain.onnx          2.00 ms           -  125 kFLOP        -        -  -" in text.splitlines()
    assert "chain.onnx" not in text.split("Time by operator type:")[1]


# -- HTML ----------------------------------------------------------------------------------------


class _Checker(HTMLParser):
    """Collects tags and checks every element that must be closed is closed in order."""

    def __init__(self) -> None:
        super().__init__()
        self.open: list[str] = []
        self.tags: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag not in VOID:
            self.open.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)

    def handle_endtag(self, tag: str) -> None:
        assert self.open and self.open[-1] == tag, f"</{tag}> closes <{self.open[-1] if self.open else None}>"
        self.open.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse(page: str) -> _Checker:
    checker = _Checker()
    checker.feed(page)
    checker.close()
    assert checker.open == [], f"unclosed: {checker.open}"
    return checker


class _Page(HTMLParser):
    """The page's table rows (cell texts), definition lists and tooltips, by the id of the section holding them."""

    def __init__(self) -> None:
        super().__init__()
        self.section = ""
        self.rows: dict[str, list[list[str]]] = {}
        self.lists: dict[str, list[dict[str, str]]] = {}
        self.titles: dict[str, list[str]] = {}
        self.texts: dict[str, list[str]] = {}
        self.buffer: list[str] | None = None
        self.term = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag == "section":
            self.section = attributes.get("id") or ""
        elif tag == "tr":
            self.rows.setdefault(self.section, []).append([])
        elif tag == "dl":
            self.lists.setdefault(self.section, []).append({})
        elif tag in ("td", "th", "dt", "dd"):
            self.buffer = []
        if attributes.get("title"):
            self.titles.setdefault(self.section, []).append(str(attributes["title"]))

    def handle_endtag(self, tag: str) -> None:
        if tag not in ("td", "th", "dt", "dd") or self.buffer is None:
            return
        text = " ".join("".join(self.buffer).split())
        if tag == "dt":
            self.term = text
        elif tag == "dd":
            self.lists[self.section][-1][self.term] = text
        else:
            self.rows[self.section][-1].append(text)
        self.buffer = None

    def handle_data(self, data: str) -> None:
        self.texts.setdefault(self.section, []).append(data)
        if self.buffer is not None:
            self.buffer.append(data)


def read_page(page: str) -> _Page:
    reader = _Page()
    reader.feed(page)
    reader.close()
    return reader


def as_written(value: Any) -> str:
    """A setting as a user writes it."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if value is None:
        return "none"
    if isinstance(value, dict):
        return ", ".join(f"{key}={item}" for key, item in value.items()) or "none"
    if isinstance(value, list):
        return ", ".join(map(str, value))
    return str(value)


def assert_every_number_matches(page: str, report: dict[str, Any]) -> None:
    """Every number the page shows is one of the report's, as the terminal formats it, in its place."""
    reader = read_page(page)
    models = [m for m in report["models"] if "error" not in m]
    validated = [m for m in models if m.get("measured_s") is not None]
    calibrated = any(m.get("calibrated_s") is not None for m in models)
    rows = {row[0]: row for row in reader.rows["models"][1:]}
    margins = (report.get("verdict") or {}).get("models") or {}
    for model in models:
        unknown = model.get("unknown_flops_time_s")
        expected = [
            model["path"], str(model["layers"]), str(model["bricks"]), str(model["unique_bricks"]),
            format_seconds(model["sequential_s"]),
            *([format_margin(margins.get(model["path"]))] if margins else []),
            *([format_seconds(model.get("parallel_s"))] if parallel_estimated(report) else []),
            format_seconds(model["critical_path_s"]),
            *([format_seconds(model.get("measured_s")), format_ratio(model.get("ratio"))] if validated else []),
            *([format_seconds(model.get("calibrated_s"))] if calibrated else []),
            *([format_ratio(model.get("calibrated_ratio"))] if calibrated and validated else []),
            "failed" if "load_error" in model else format_seconds(model.get("load_s")),
            format_flops(model.get("flops")), format_rate(model.get("flops_per_s")),
            format_share(model.get("peak_fraction")),
            "-" if not unknown else f"{format_seconds(unknown)} ({format_share(unknown / model['sequential_s'])})",
            describe_inputs(model),
            "yes" if model["complete"] else f"no ({model['measured_bricks']}/{model['bricks']})",
        ]  # fmt: skip
        assert rows[model["path"]] == expected
    for row in reader.rows.get("validation", [])[1:-1]:
        model = next(m for m in validated if m["path"] == row[0])
        assert row[2:] == [
            format_seconds(model["sequential_s"]),
            format_seconds(model["measured_s"]),
            format_ratio(model["ratio"]),
        ]
        assert model["ratio"] == pytest.approx(model["sequential_s"] / model["measured_s"])
    assert len(reader.rows.get("validation", [[], []])) - 2 == len(validated)
    for row in reader.rows["op-types"][1:]:
        model = next(m for m in models if m["path"] == row[0])
        assert row[2] == format_seconds(model["sequential_s"])
        times = {**model["op_time_s"], **({"inference call": model["call_s"]} if model.get("call_s") else {})}
        total = sum(times.values())
        largest = sorted(times.items(), key=lambda item: -item[1])[:3]
        assert row[3] == ", ".join(f"{op} {format_share(seconds / total)}" for op, seconds in largest)
    bricks = {brick.get("label"): brick for brick in report["bricks"]}
    for row in reader.rows["bricks"][1:]:
        brick = bricks[row[0]]
        uses = sum(brick["models"].values())
        assert row[2:4] == [
            format_seconds(brick["time_s"]),
            format_seconds((brick.get("work_s") or brick["time_s"]) * uses),
        ]
        assert row[4:] == [
            format_flops(brick["flops"]) if brick["flops"] is not None else row[4],
            format_rate(brick.get("flops_per_s")),
            format_share(brick.get("peak_fraction")),
        ]
    settings = reader.lists["settings"][0]
    for key, value in report["settings"].items():
        assert settings[key] == as_written(value), key
    summary = report["summary"]
    lead = " ".join(reader.texts[""])
    for count in (summary["models"], summary["layers"], summary["bricks"], summary["distinct_bricks"]):
        assert f"{count} " in lead
    if report.get("peak"):
        assert format_rate(report["peak"]["flops_per_s"]) in lead


def test_every_number_on_the_page_is_the_reports(report: dict[str, Any]) -> None:
    report["models"][0].update(measured_s=14e-6, ratio=15e-6 / 14e-6, paired_ratio=1.02)
    assert_every_number_matches(render_html(report), report)


def test_every_number_on_a_real_runs_page_is_its_json_reports(
    pytester: pytest.Pytester, copy_models: Callable[..., list[Path]]
) -> None:
    copy_models(SAMPLE_MODELS / "mlp.onnx", SAMPLE_MODELS / "tiny_inception.onnx")
    args = ("--dlbricks-granularity=2", "--dlbricks-validate", "--dlbricks-json=r.json", "--dlbricks-html=r.html")
    assert run_dlbricks(pytester, *args, "models").ret == 0
    report = json.loads((pytester.path / "r.json").read_text())
    assert_every_number_matches((pytester.path / "r.html").read_text(), report)


def test_page_is_well_formed_and_self_contained(report: dict[str, Any]) -> None:
    page = render_html(report)
    checker = parse(page)
    assert page.startswith("<!doctype html>")
    assert {"script", "link", "img", "iframe"}.isdisjoint(checker.tags)
    for reference in ("http://", "https://", "url(", "@import", "src="):
        assert reference not in page
    for section in ("Models", "Where the time goes", "Top bricks", "Per model", "Settings and machine"):
        assert f"<h2>{section}</h2>" in page
    assert "Estimate vs measured" not in page
    text = " ".join(checker.text)
    assert "chain.onnx" in text and "loop_acc_None.onnx" in text and "bad.onnx" in text
    assert "unknown (Loop)" in text
    assert "100.0" in text and "GFLOP/s GEMM peak (this machine)" in text
    assert "test cpu" in text


def test_a_failed_model_spans_the_row_with_its_error(report: dict[str, Any]) -> None:
    page = render_html(report)
    assert '<td colspan="12"><span class="bad">empty</span></td>' in page, "no Parallel column: none was estimated"


def test_a_partial_report_says_so_on_its_page(report: dict[str, Any]) -> None:
    assert "partial" not in render_html({**report, "partial": False})
    assert "The run stopped early: this report is partial" in render_html({**report, "partial": True})


def test_an_operator_type_has_its_colour_in_every_report(report: dict[str, Any]) -> None:
    page = render_html(report)
    assert f'<i style="background:{OP_COLOURS["Conv"]}"></i>Conv' in page
    assert f'<i style="background:{op_colour("Loop")}"></i>Loop' in page
    assert op_colour("Loop") == op_colour("Loop") != op_colour("Sigmoid"), "from the name alone"
    other = copy.deepcopy(report)
    other["models"][0]["op_time_s"] = {"Relu": 1e-3, "Conv": 1e-6}  # another order of weight, another run
    assert f'<i style="background:{OP_COLOURS["Conv"]}"></i>Conv' in render_html(other)
    assert page.count(f'background:{OP_COLOURS["Conv"]}" title=') == 1, "Conv only in the chain's bar"
    assert page.count(f'background:{OP_COLOURS["Relu"]}" title=') == 2, "Relu in both bars"
    assert len(set(OP_COLOURS.values())) == len(OP_COLOURS), "no two common types look alike"
    assert OTHER_COLOUR not in page


def test_many_operator_types_share_the_other_colour(report: dict[str, Any]) -> None:
    report["models"][0]["op_time_s"] = {f"Op{i}": 1.0 for i in range(SHOWN_OP_TYPES + 3)}
    page = render_html(report)
    assert f'<i style="background:{OTHER_COLOUR}"></i>other' in page


def test_text_from_the_report_is_escaped(report: dict[str, Any]) -> None:
    report = copy.deepcopy(report)
    report["models"][2]["error"] = "<b>bad</b> & worse"
    report["machine"]["cpu"] = '"quoted" <cpu>'
    page = render_html(report)
    parse(page)
    assert "&lt;b&gt;bad&lt;/b&gt; &amp; worse" in page and "<b>bad</b>" not in page
    assert "&quot;quoted&quot; &lt;cpu&gt;" in page


def test_calibration_adds_its_columns_and_names_its_models(report: dict[str, Any]) -> None:
    chain = report["models"][0]  # sequential_s 15 us
    chain.update(measured_s=14e-6, ratio=15 / 14, calibrated_s=14.5e-6, calibrated_ratio=14.5 / 14)
    report["calibration"] = {
        "work_factor": 1.04,
        "per_byte_s": 2.4e-12,
        "per_layer_s": 4.2e-7,
        "per_layer_missing": None,
        "models": ["light/a.onnx", "light/b.onnx"],
    }
    page = render_html(report)
    assert_every_number_matches(page, report)
    assert '<th class="num">Calibrated</th><th class="num">Calibrated ratio</th>' in page
    line = (
        "Calibrated on 2 models (light/a.onnx, light/b.onnx): bricks' work x1.040 + 2.4 us per MB its layers move"
        " + 0.42 us per layer."
    )
    assert escape(line) in page
    table = render_table(report)
    assert "Calibrated  Calibrated ratio" in table
    assert line[1:-1] in table


@pytest.mark.parametrize(
    ("fields", "ending"),
    [
        ({"per_layer_s": 0.0, "per_layer_missing": "it is not known"}, "move (no cost per layer: it is not known)"),
        ({}, "move"),  # a report of a version that fitted none says nothing of it
    ],
)
def test_a_calibration_without_a_cost_per_layer_says_why(
    report: dict[str, Any], fields: dict[str, Any], ending: str
) -> None:
    report["calibration"] = {"work_factor": 1.04, "per_byte_s": 2.4e-12, "models": ["light/a.onnx"], **fields}
    line = f"calibrated on 1 model (light/a.onnx): bricks' work x1.040 + 2.4 us per MB its layers {ending}"
    assert line in render_table(report).splitlines()
    assert escape(f"C{line[1:]}.") in render_html(report)


def test_a_declined_calibration_says_so_instead_of_its_coefficients(report: dict[str, Any]) -> None:
    why = "each estimated from the others, they scored 84.0%, no better than 86.0% raw"
    report["calibration"] = {"work_factor": 1.0, "per_byte_s": 0.0, "models": ["a.onnx"], "declined": why}
    line = f"calibration on 1 model (a.onnx) not applied: {why}"
    assert line in render_table(report).splitlines()
    assert escape(f"C{line[1:]}.") in render_html(report)


def test_validation_adds_columns_and_a_ratio_chart(report: dict[str, Any]) -> None:
    chain = report["models"][0]  # sequential_s 15 us
    chain.update(measured_s=14e-6, ratio=15 / 14, paired_ratio=1.02)
    page = render_html(report)
    parse(page)
    assert "<h2>Estimate vs measured</h2>" in page
    assert '<th class="num">Measured</th><th class="num">Ratio</th>' in page
    row = page.split('id="validation"')[1].split("chain.onnx</code></td>")[1].split("</tr>")[0]
    assert '<td class="num">15.0 us</td><td class="num">14.0 us</td><td class="num">1.07</td>' in row
    assert 'title="chain.onnx: ratio 1.07; in paired rounds 1.02"' in row
    assert page.count('class="dot ') == 1, "one model was validated"


def test_the_page_gives_the_terminal_s_closing_lines_on_speed_accuracy_and_noise(report: dict[str, Any]) -> None:
    """The noise beside every accuracy figure, and how far the machine's speed moved, on the page as in the terminal."""
    report["models"][0].update(measured_s=14e-6, ratio=15 / 14, paired_ratio=1.02)
    report["summary"].update(noise=0.074, speed={**SPEED, "spread": 0.303})
    one = {"accuracy": 0.934, "geometric_mean_ratio": 1.071, "within_10_percent": 1, "models": 1}
    report["accuracy"] = {"sequential": one, "noise": 0.061, "speedup": 2.5}
    page = render_html(report)
    parse(page)
    table = render_table(report).splitlines()
    speed = next(line for line in table if line.startswith("Machine speed"))
    models, validation = page.split('id="models"')[1].split('id="validation"')
    assert f"<p class=muted>{escape(speed)}</p>" in models
    closing = table[table.index(speed) + 1 :]
    assert closing and all(f"<p class=muted>{escape(line)}</p>" in validation for line in closing)
    assert "machine noise +-3.0%" in validation


def test_the_accuracy_s_noise_line_names_the_speed_drift_where_it_exceeds_the_rounds_noise() -> None:
    """Sequential / Measured compares bricks and models timed at other moments: where the machine's speed
    moved more than the paired rounds spread, the noise beside the figures says so."""
    one = {"accuracy": 0.793, "geometric_mean_ratio": 0.86, "within_10_percent": 17, "models": 44}
    accuracy = {"sequential": one, "noise": 0.15}
    moved = accuracy_lines(accuracy, {"speed": {**SPEED, "spread": 0.227}})[-1]
    assert moved.startswith("machine noise +-7.5% (half the interquartile range of per-round ratios);")
    assert "; the machine's speed +-22.7% through the run (the Sequential / Measured line's bricks and" in moved
    for spread in (0.07, 0.04):  # within the rounds' noise; within 5% with no noise figure
        settled = accuracy_lines(
            {**accuracy, "noise": 0.15 if spread > 0.05 else None}, {"speed": {**SPEED, "spread": spread}}
        )
        assert "machine's speed" not in "\n".join(settled)
    assert "machine's speed" not in "\n".join(accuracy_lines(accuracy, {}))


def test_a_report_written_before_the_5_percent_band_was_counted_gives_the_10_percent_one() -> None:
    older = {"accuracy": 0.934, "geometric_mean_ratio": 1.071, "within_10_percent": 3, "models": 4}
    (line,) = accuracy_lines({"sequential": older}, {})
    assert line.endswith(": 93.4% (geometric mean ratio 1.071, 3/4 models within +-10%)")
    (line,) = accuracy_lines({"sequential": {**older, "within_5_percent": 1}}, {})
    assert line.endswith(": 93.4% (geometric mean ratio 1.071, 1/4 models within +-5%, 3/4 within +-10%)")


def test_an_incomplete_model_says_so_instead_of_a_bar(report: dict[str, Any]) -> None:
    chain = report["models"][0]
    chain.update(complete=False, measured_bricks=1, sequential_s=None, op_time_s=None, top_bricks=None)
    page = render_html(report)
    parse(page)
    assert "incomplete: not every brick was measured" in page
    assert '<span class="warn">no (1/6)</span>' in page


def test_the_models_own_call_shows_beside_its_operator_types(report: dict[str, Any]) -> None:
    chain = report["models"][0]
    chain["call_s"] = 5e-6  # Conv 12 us, Relu 3 us, call 5 us
    lines = render_analysis(report, verbose=True).splitlines()
    assert "  chain.onnx          Conv 60%, (call) 25%, Relu 15%" in lines
    page = render_html(report)
    parse(page)
    assert f'<i style="background:{CALL_COLOUR}"></i>{CALL} (once per model)' in page
    assert f'background:{CALL_COLOUR}" title="{CALL}: 5.0 us (25%)"' in page
    assert f"Conv 60%, {CALL} 25%, Relu 15%" in page


def test_no_text_is_drawn_over_a_bar(report: dict[str, Any]) -> None:
    """Shares stand beside their bars: a segment of the operator chart and a share bar's fill hold no text."""
    page = render_html(report)
    assert page.count('<div class="stack">') == 2
    for stack in page.split('<div class="stack">')[1:]:
        segments = stack.split("</div>")[0]
        assert segments.replace("></span>", "").count(">") == 0, "segments are empty"
    assert (
        '<span class="text">80%</span><span class="track"><span class="fill" style="width:80.0%"></span></span>' in page
    )


def test_settings_read_as_a_user_writes_them(report: dict[str, Any]) -> None:
    report["settings"].update(validate=False, shard=None, sweep={})
    settings = read_page(render_html(report)).lists["settings"][0]
    assert {"validate": "off", "shard": "none", "sweep": "none"}.items() <= settings.items()
    assert "True" not in settings.values() and "False" not in settings.values() and "None" not in settings.values()


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, "-"),
        (0.0, "0.0 us"),
        (4.5e-6, "4.5 us"),
        (999e-6, "999.0 us"),
        (1e-3, "1.00 ms"),
        (0.0123, "12.30 ms"),
        (1.0, "1.000 s"),
        (62.5, "62.500 s"),
    ],
)
def test_format_seconds_picks_the_unit(seconds: float | None, text: str) -> None:
    assert format_seconds(seconds) == text


@pytest.mark.parametrize(("seconds", "text"), [(0.99996e-3, "1.00 ms"), (0.9999996, "1.000 s")])
def test_format_seconds_switches_unit_after_rounding(seconds: float, text: str) -> None:
    assert format_seconds(seconds) == text


SPEED = {"reference": "a chain", "samples": 48, "every_s": 0.25, "q1_s": 11e-6, "median_s": 19e-6, "q3_s": 22.5e-6}


def test_a_machine_whose_speed_moved_more_than_the_bricks_spread_is_told_what_that_means() -> None:
    line = speed_line({"noise": 0.074, "speed": {**SPEED, "spread": 0.303}})
    assert line == (
        "Machine speed through the run: a chain took 11.0 us to 22.5 us (quartiles of 48 samples at least 0.25 s"
        " apart; median 19.0 us): +-30.3%; the bricks' own rounds typically +-3.7%: each brick is timed within a"
        " moment, so estimates of bricks timed at other moments may be off by about as much as the speed moved"
    )


@pytest.mark.parametrize(
    ("trace", "said"),
    [
        ({"waits": 0, "waited_s": 0.0, "timed_slow": 0}, ""),
        (
            {"waits": 1, "waited_s": 0.04, "timed_slow": 0},
            "; 1 timing began in its slow state and waited 0.0 s for the fast one",
        ),
        (
            {"waits": 122, "waited_s": 19.63, "timed_slow": 41},
            "; 122 timings began in its slow state and waited 19.6 s for the fast one, 41 timed slow all the same"
            " (the wait's budget ran out)",
        ),
        ({"waits": "many", "waited_s": 1.0, "timed_slow": 0}, ""),
        (
            {"known_fast_s": 9.9e-6, "met_fast_s": 15.7e-6, "above_known": 0.586},
            "; this run never met the machine's fast state: 15.7 us at its fastest moments against 9.9 us in earlier"
            " runs (+59%), so its bricks may all read slow",
        ),
        ({"known_fast_s": 9.9e-6, "met_fast_s": 10.2e-6, "above_known": 0.0}, ""),
        ({"known_fast_s": 9.9e-6, "met_fast_s": None, "above_known": None}, ""),
        ({"known_fast_s": "fast", "met_fast_s": 15.7e-6, "above_known": 0.586}, ""),
    ],
    ids=[
        *("no wait", "one wait", "waits slow all the same", "damaged waits"),
        *("fast state never met", "fast state met", "too few moments", "damaged fast state"),
    ],
)
def test_the_speed_line_says_how_timings_met_the_fast_state(trace: dict, said: str) -> None:
    """How often timings waited for the fast state, and where earlier runs met one this run never did."""
    line = speed_line({"noise": None, "speed": {**SPEED, "spread": 0.303, **trace}})
    assert line == (
        "Machine speed through the run: a chain took 11.0 us to 22.5 us (quartiles of 48 samples at least 0.25 s"
        " apart; median 19.0 us): +-30.3%" + said
    )


@pytest.mark.parametrize(("noise", "spread"), [(0.074, 0.02), (0.02, 0.04)], ids=["below the bricks", "below 5%"])
def test_a_steady_machine_gets_the_figures_alone(noise: float, spread: float) -> None:
    line = speed_line({"noise": noise, "speed": {**SPEED, "spread": spread}})
    assert line is not None and line.endswith(f"the bricks' own rounds typically +-{noise / 2:.1%}")


def test_without_the_bricks_spread_the_trace_stands_alone() -> None:
    alone = speed_line({"noise": None, "speed": {**SPEED, "spread": 0.0}})
    assert alone is not None and alone.endswith("median 19.0 us): +-0.0%")


def test_no_trace_no_line() -> None:
    assert speed_line({"noise": 0.05}) is None
    assert speed_line({"noise": 0.05, "speed": None}) is None
    assert speed_line({"noise": 0.05, "speed": {**SPEED, "spread": None}}) is None


def one_at_a_time(factor: float, sessions: object) -> dict[str, Any]:
    """A report's executor entry: one node at a time, every layer slowed by ``factor`` in the pool."""
    pool = {"factor": factor, "layer_s": 0.0, "sessions": sessions, "rounds": 3, "graph": "a chain"}
    detection: dict[str, Any] = {"concurrent": False, "threads": 1, "sequential_s": 1e-3, "parallel_s": 1e-3}
    detection.update(ratio=1.0, rounds=7, graph="chains", pool=pool, concurrent_below=0.8)
    return {
        "model": "one node at a time",
        "threads": 1,
        "pool_factor": factor,
        "pool_layer_s": 0.0,
        "detection": detection,
        "call_s": 4e-6,
        "parallel_call_s": 5e-6,
        "critical_path": "the lower bound",
    }


def test_the_pool_slowdown_is_printed_with_the_times_it_follows_from() -> None:
    line = executor_line(one_at_a_time(3.0, [[1e-3, 2e-3], [1.2e-3, 4e-3], [0.8e-3, 3e-3]]))
    expected = (
        "at 3.00x their time, as the parallel executor ran such layers here (a chain: the mean parallel time,"
        " 3.00 ms (2.00 ms to 4.00 ms by session), over the median sequential one, 1.00 ms)"
    )
    assert line is not None and expected in line


@pytest.mark.parametrize(
    ("ratio", "at_once", "said"),
    [
        (1.0, 0, "1.00, not under 0.8; in onnxruntime's profile no node started while another ran)"),
        (
            0.79,
            0,
            "0.79, under 0.8, but in onnxruntime's profile no node started while another ran: the machine's speed"
            " moved between rounds)",
        ),
        (
            1.0,
            3,
            "1.00, not under 0.8, though in onnxruntime's profile 3 nodes started while another ran: running them"
            " at once gained too little)",
        ),
        (1.0, None, "1.00, not under 0.8)"),  # a detection kept from a version that did not profile
    ],
)
def test_the_executor_line_says_what_the_profile_showed_beside_the_ratio(
    ratio: float, at_once: int | None, said: str
) -> None:
    executor = one_at_a_time(3.0, [[1e-3, 2e-3]])
    executor["detection"].update(ratio=ratio, nodes_at_once=at_once)
    line = executor_line(executor)
    assert line is not None and f"median of the rounds' parallel / sequential {said}, so Parallel is Sequential" in line


@pytest.mark.parametrize(
    "sessions",
    [[[1e-3, 2e-3], [1e-3, 4e-3]], [[None, 1e-3], [None, 2e-3]], [], "damaged", [[1e-3]]],
    ids=["an older method's pairs", "damaged times", "none", "not a list", "not pairs"],
)
def test_sessions_that_do_not_give_the_slowdown_back_print_no_figures(sessions: object) -> None:
    """A detection of the older method averaged each pair's ratio: its sessions no longer give its factor."""
    line = executor_line(one_at_a_time(1.4, sessions))
    assert line is not None and "at 1.40x their time, as the parallel executor ran such layers here (a chain)" in line


def test_the_inputs_column_says_when_a_model_lists_weights_as_inputs() -> None:
    """onnxruntime runs such weights as no constants: the model is slower than it could be, and the table says why."""
    assert (
        describe_inputs({"inputs": "synthetic", "weights_as_inputs": 6})
        == "synthetic; 6 weights listed as graph inputs, not constants"
    )
    assert describe_inputs({"inputs": "synthetic", "weights_as_inputs": 1}).endswith(
        "; 1 weight listed as a graph input, not constants"
    )
    for absent in ({}, {"weights_as_inputs": 0}, {"weights_as_inputs": "6"}):
        assert describe_inputs({"inputs": "synthetic", **absent}) == "synthetic"
    marked = {"path": "m.onnx", "inputs": "synthetic", "weights_as_inputs": 6}
    assert describe_inputs(marked, short=True) == "synthetic*", "a fitted table marks the cell"
    (note,) = inputs_notes([marked])
    assert note.startswith("* weights listed as graph inputs, not constants, in m.onnx (6)")


def test_a_table_fitted_to_the_terminal_shortens_paths_then_leaves_columns_out() -> None:
    model = {
        "path": "models/a_model_with_a_rather_long_name.onnx", "layers": 8, "bricks": 4, "unique_bricks": 4,
        "measured_bricks": 4, "sequential_s": 1e-4, "parallel_s": 1e-4, "critical_path_s": 1e-4, "complete": True,
        "inputs": "synthetic", "data_dependent_ops": ["Loop"],
    }  # fmt: skip
    summary = {"models": 1, "layers": 8, "bricks": 4, "distinct_bricks": 4, "distinct_ratio": 1.0, "measured_bricks": 4}
    report = {"models": [model], "summary": summary, "executor": {"model": "one node at a time"}}
    full = render_table(report).splitlines()
    assert "synthetic, but Loop depends on data: give sample inputs" in full[2] and "Critical path" in full[0]
    roomy = render_table(report, width=110).splitlines()
    assert max(len(line) for line in roomy[:3]) == 110, "the path shortened just enough"
    assert roomy[2].startswith("..._rather_long_name.onnx ") and "synthetic*" in roomy[2]
    assert roomy[3].startswith("* synthetic inputs, but data steers the work of models/a_model_with_a_rather")
    fitted = render_table(report, width=90).splitlines()
    assert max(len(line) for line in fitted[:3]) <= 90
    assert fitted[0].split() == [
        "Model",
        "Layers",
        "Bricks",
        "Distinct",
        "Sequential",
        "Parallel",
        "Inputs",
        "Complete",
    ]
    assert fitted[2].startswith("...er_long_name.onnx ")
    assert fitted[4] == "Left out to fit the terminal: Critical path (-v shows every column)"
    # A width no table fits: every column it may leave out is, and paths keep their least width.
    narrow = render_table(report, width=20).splitlines()
    assert narrow[0].split() == ["Model", "Distinct", "Sequential", "Parallel", "Complete"]
    assert narrow[2].startswith("...name.onnx ")


@pytest.mark.parametrize(
    ("path", "width", "shown"),
    [
        ("models/mlp.onnx[batch=1,fp32]", 20, "...mlp[batch=1,fp32]"),
        ("models/tiny_rnn.onnx[batch=1,fp32]", 20, "...rnn[batch=1,fp32]"),
        ("models/tiny_rnn.onnx[batch=1,fp32]", 26, "...tiny_rnn[batch=1,fp32]"),
        ("models/tiny_rnn.onnx[batch=1,fp32]", 30, "...tiny_rnn.onnx[batch=1,fp32]"),
        ("models/mlp.onnx[batch=16,fp16]", 12, "...=16,fp16]"),
    ],
)
def test_a_sweep_points_row_keeps_its_model_before_its_folders(path: str, width: int, shown: str) -> None:
    """At 80 columns rows of two models at the same point read ``...nnx[batch=1,fp32]`` alike."""
    assert shorten_path(path, width) == shown and len(shown) <= width


def test_shorten_path_keeps_the_file_name() -> None:
    assert shorten_path("light/light_bvlc_alexnet.onnx", 30) == "light/light_bvlc_alexnet.onnx"
    assert shorten_path("light/light_bvlc_alexnet.onnx", 16) == "..._alexnet.onnx"


def test_fit_lines_wraps_prose_but_not_table_rows_or_paths() -> None:
    prose = "dlbricks: " + " ".join(["word"] * 30)
    row = "model.onnx  " + "  ".join(["1.00 ms"] * 12)
    path = "dlbricks: report written to /" + "x" * 120
    fitted = fit_lines("\n".join([prose, row, path, "short"]), 40).splitlines()
    word = "  " + path.split()[-1]
    assert row in fitted and word in fitted and fitted[-1] == "short"
    assert all(len(line) <= 40 for line in fitted if line not in (row, word))
    assert fitted[1].startswith("  word")


def test_progress_line_names_the_model_and_what_is_left() -> None:
    assert (
        progress_line("models/mlp.onnx", 2, 5, 100) == "dlbricks: loading and cutting models/mlp.onnx (2 of 5, 3 left)"
    )
    assert progress_line("models/mlp.onnx", 5, 5, 100).endswith("(5 of 5)")
    long = progress_line("zoo/" + "deep/" * 30 + "model.onnx", 1, 2, 80)
    assert len(long) <= 79 and "model.onnx (1 of 2, 1 left)" in long


def test_a_model_path_stays_whole_on_one_line_shortened_from_the_left(report: dict[str, Any]) -> None:
    report = copy.deepcopy(report)
    long = "zoo/vision/classification/" + "light_bvlc_alexnet" * 3 + ".onnx"
    report["models"][0]["path"] = long
    page = render_html(report)
    assert "<wbr>" not in page and "overflow-wrap: anywhere" not in page
    assert "td code.path { white-space: nowrap; }" in page
    shown = f'<code class=path title="{long}">...{long[-(LABEL_CHARS - 3) :]}</code>'
    assert shown in page


def test_the_page_gives_the_run_s_verdict(report: dict[str, Any]) -> None:
    report = copy.deepcopy(report)
    report["verdict"] = {"margin": 0.04, "trusted": True, "sources": {"bricks": 0.03, "speed": 0.03}, "advice": []}
    page = render_html(report)
    assert (
        "<p><strong>Verdict:</strong> estimates hold within +-4% (bricks&#x27; spread +-3%, machine speed +-3%).</p>"
        in page
    )
    del report["verdict"]
    assert "Verdict:" not in render_html(report), "a report written before runs gave one"


def test_each_model_s_own_margin_follows_its_estimate() -> None:
    """Where the run's verdict gives each model its margin, the table shows it after the sequential estimate; a
    model without one (failed, or not complete) shows a dash, and a run without margins has no such column."""
    complete = {
        "path": "cnn.onnx", "layers": 8, "bricks": 4, "unique_bricks": 4, "measured_bricks": 4,
        "sequential_s": 1e-3, "parallel_s": None, "critical_path_s": 1e-3, "complete": True, "inputs": "synthetic",
    }  # fmt: skip
    summary = {"models": 2, "layers": 8, "bricks": 4, "distinct_bricks": 4, "distinct_ratio": 1.0, "measured_bricks": 4}
    report: dict[str, Any] = {
        "models": [complete, {"path": "broken.onnx", "error": "cannot be read"}],
        "summary": summary,
        "verdict": {"margin": 0.3, "trusted": True, "sources": {}, "models": {"cnn.onnx": 0.084}},
    }
    header, _, cnn, broken, *_ = render_table(report).splitlines()
    assert header.split()[4:7] == ["Sequential", "Within", "Critical"]
    assert cnn.split()[4:8] == ["1.00", "ms", "+-8%", "1.00"]
    assert broken.split()[:7] == ["broken.onnx", "-", "-", "-", "-", "-", "-"] and broken.split()[-1] == "error"
    assert len(broken.split()) == len(header.split()) - 1, "one cell a column (Critical path is two words)"
    report["verdict"] = {"margin": None, "trusted": False, "sources": {}}
    assert "Within" not in render_table(report).splitlines()[0]
