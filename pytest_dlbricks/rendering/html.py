"""The HTML report: one self-contained page rendered as a string from the report's data.

No server, no network, no script, no external font: styles are inline and charts are drawn with
HTML and CSS, so the file opens from disk anywhere and can be attached to a CI run as it is. Every
number on the page is one of the report's, formatted as the terminal formats it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from .. import __version__
from ..core.verdict import verdict_line
from ..core.wording import plural
from .accuracy_text import accuracy_lines, calibration_line
from .executor_text import executor_line
from .formatting import format_flops, format_margin, format_rate, format_ratio, format_seconds, format_share
from .html_charts import _colours, _op_chart, _op_times, _ratio_chart
from .html_parts import _bar, _definitions, _muted, _path, _section, _short, _table
from .terminal import describe_inputs, model_margins_of, parallel_estimated, speed_line

#: Bricks in the run-wide table, heaviest first.
TOP_BRICKS = 15

_STYLE = """
:root { color-scheme: light; --ink: #1f2328; --muted: #59636e; --line: #d1d9e0; --band: #f6f8fa; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial,
       sans-serif; color: var(--ink); background: #fff; }
main { max-width: 1480px; margin: 0 auto; padding: 24px 28px 40px; }
h1 { font-size: 24px; margin: 0 0 4px; }
h2 { font-size: 18px; margin: 32px 0 10px; padding-bottom: 4px; border-bottom: 1px solid var(--line); }
h3 { font-size: 15px; margin: 16px 0 6px; }
p { margin: 6px 0; }
.muted { color: var(--muted); }
.cards { display: flex; flex-wrap: wrap; gap: 12px; margin: 16px 0 4px; }
.card { border: 1px solid var(--line); border-radius: 6px; padding: 10px 14px; min-width: 170px; }
.card .value { font-size: 20px; font-weight: 600; font-variant-numeric: tabular-nums; }
.card .label { color: var(--muted); font-size: 12px; }
table { border-collapse: collapse; width: 100%; font-size: 13px; font-variant-numeric: tabular-nums; }
th, td { padding: 4px 6px; border-bottom: 1px solid var(--line); text-align: left; vertical-align: top; }
th { background: var(--band); font-weight: 600; vertical-align: bottom; }
.wide { overflow-x: auto; }
td.num, th.num { text-align: right; }
td.num { white-space: nowrap; }
td code.path { white-space: nowrap; }
tbody tr:nth-child(even) td { background: #fbfcfd; }
code { font: 12px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
.bar { display: flex; align-items: center; gap: 8px; min-width: 180px; }
.bar .text { min-width: 3.5em; text-align: right; }
.bar .track { flex: 1; height: 10px; background: var(--band); border-radius: 2px; overflow: hidden; }
.bar .fill { display: block; height: 100%; background: #9fbfdf; }
.legend { display: flex; flex-wrap: wrap; gap: 6px 16px; margin: 8px 0 0; font-size: 13px; }
.legend i { display: inline-block; width: 12px; height: 12px; border-radius: 2px; margin-right: 5px;
            vertical-align: -1px; }
.chart td { vertical-align: middle; }
.chart td:nth-child(2) { width: 50%; min-width: 240px; }
.stack { display: flex; height: 20px; border-radius: 2px; overflow: hidden; }
.stack span { display: block; height: 100%; }
.axis { position: relative; height: 20px; }
.axis .band { position: absolute; top: 0; bottom: 0; background: #e6f4ea; }
.axis .one { position: absolute; top: 0; bottom: 0; width: 1px; background: var(--muted); }
.axis .dot { position: absolute; top: 4px; width: 12px; height: 12px; margin-left: -6px; border-radius: 50%; }
.axis .tick { position: absolute; top: 2px; transform: translateX(-50%); color: var(--muted); font-size: 12px; }
.good { background: #1a7f37; }
.off { background: #cf222e; }
details { border: 1px solid var(--line); border-radius: 6px; padding: 6px 12px; margin: 8px 0; }
details[open] { padding-bottom: 12px; }
summary { cursor: pointer; font-weight: 600; }
summary .muted { font-weight: 400; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: 4px 16px; margin: 0; }
dt { color: var(--muted); }
dd { margin: 0; }
.columns { display: grid; grid-template-columns: 1fr 1fr; gap: 24px; }
.warn { color: #9a6700; }
.bad { color: #cf222e; }
"""


def render_html(report: Mapping[str, Any]) -> str:
    """The whole page for ``report`` (the JSON form of :class:`pytest_dlbricks.reporting.report.RunReport`)."""
    models = list(report["models"])
    colours = _colours(models)
    validated = [m for m in models if m.get("measured_s") is not None]
    calibrated = any(m.get("calibrated_s") is not None for m in models)
    table = _models_table(
        models,
        validated=bool(validated),
        calibrated=calibrated,
        parallel=parallel_estimated(report),
        margins=model_margins_of(report),
    )
    line = calibration_line(report.get("calibration"))
    verdict = report.get("verdict")
    judged = verdict_line(verdict).removeprefix("dlbricks verdict: ") if verdict else None
    sections = [
        _header(report),
        _section(
            "Models",
            table
            + (f"<p><strong>Verdict:</strong> {escape(judged)}.</p>" if judged else "")
            + (f"<p>{escape(line[:1].upper() + line[1:])}.</p>" if line else "")
            + _muted([speed_line(report["summary"]), executor_line(report.get("executor"))]),
            anchor="models",
        ),
        _section("Where the time goes", _op_chart(models, colours), anchor="op-types"),
    ]
    if validated:
        accuracy = accuracy_lines(report.get("accuracy"), report["summary"])
        sections.append(
            _section("Estimate vs measured", _ratio_chart(validated) + _muted(accuracy), anchor="validation")
        )
    sections += [
        _section("Top bricks", _bricks_table(report), anchor="bricks"),
        _section("Per model", "".join(_model_details(m) for m in models if "error" not in m), anchor="per-model"),
        _section("Settings and machine", _settings(report), anchor="settings"),
        _notes(),
    ]
    return (
        '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>pytest-dlbricks report: {plural(len(models), 'model')}</title>\n<style>{_STYLE}</style>\n</head>\n"
        f"<body>\n<main>\n{''.join(sections)}</main>\n</body>\n</html>\n"
    )


# -- page parts ----------------------------------------------------------------------------------


def _header(report: Mapping[str, Any]) -> str:
    summary = report["summary"]
    settings = report.get("settings", {})
    ratio = summary.get("distinct_ratio")
    reused = summary.get("reused_bricks") or 0
    lead = (
        f"{plural(summary['models'], 'model')}, {plural(summary['layers'], 'layer')} cut into"
        f" {plural(summary['bricks'], 'brick')} of at most {plural(report['granularity'], 'layer')};"
        f" {summary['distinct_bricks']} distinct"
        + (f" ({format_share(ratio)})" if ratio is not None else "")
        + f", {summary['measured_bricks'] - reused} measured"
        + (f", {reused} reused from the brick store" if reused else "")
        + f". Estimates add {settings.get('statistic', 'median')} brick times."
        + (
            " The run stopped early: this report is partial, with the bricks measured until then."
            if report.get("partial")
            else ""
        )
    )
    peak = report.get("peak") or {}
    unknown = summary.get("unknown_flops_share")
    cards = [
        (format_rate(peak.get("flops_per_s")), "GFLOP/s GEMM peak (this machine)"),
        ("-" if not peak else f"{peak['bytes_per_s'] / 1e9:.1f}", "GB/s bandwidth (this machine)"),
        (format_share(unknown), "of estimated time in bricks with unknown FLOPs"),
        (str(summary.get("failed_models", 0)), "models that failed to load"),
    ]
    card_html = "".join(
        f'<div class="card"><div class="value">{escape(value)}</div><div class="label">{escape(label)}</div></div>'
        for value, label in cards
    )
    return f"<h1>pytest-dlbricks report</h1>\n<p>{escape(lead)}</p>\n<div class=cards>{card_html}</div>\n"


def _models_table(
    models: Sequence[Mapping[str, Any]],
    *,
    validated: bool,
    calibrated: bool = False,
    parallel: bool = True,
    margins: Mapping[str, object] | None = None,
) -> str:
    """The models' table; with ``margins`` (each model's own, by path), each one's after its sequential estimate."""
    estimates = ["Sequential", *(["Within"] if margins else []), *(["Parallel"] if parallel else []), "Critical path"]
    columns = ["Model", "Layers", "Bricks", "Distinct", *estimates]
    if validated:
        columns += ["Measured", "Ratio"]
    if calibrated:
        columns += ["Calibrated", "Calibrated ratio"] if validated else ["Calibrated"]
    columns += ["Load", "FLOPs", "GFLOP/s", "Of peak", "Unknown FLOPs", "Inputs", "Complete"]
    rows = []
    for model in models:
        if "error" in model:
            rows.append([_path(model["path"]), f'<span class="bad">{escape(model["error"])}</span>'])
            continue
        cells = [
            _path(model["path"]),
            str(model["layers"]),
            str(model["bricks"]),
            str(model["unique_bricks"]),
            format_seconds(model["sequential_s"]),
            *([format_margin(margins.get(str(model["path"])))] if margins else []),
            *([format_seconds(model.get("parallel_s"))] if parallel else []),
            format_seconds(model["critical_path_s"]),
        ]
        if validated:
            cells += [format_seconds(model.get("measured_s")), format_ratio(model.get("ratio"))]
        if calibrated:
            cells.append(format_seconds(model.get("calibrated_s")))
            cells += [format_ratio(model.get("calibrated_ratio"))] if validated else []
        unknown = model.get("unknown_flops_time_s")
        cells += [
            _load(model),
            format_flops(model.get("flops")),
            format_rate(model.get("flops_per_s")),
            format_share(model.get("peak_fraction")),
            "-" if not unknown else f"{format_seconds(unknown)} ({format_share(unknown / model['sequential_s'])})",
            _inputs(model),
            "yes"
            if model["complete"]
            else f'<span class="warn">no ({model["measured_bricks"]}/{model["bricks"]})</span>',
        ]
        rows.append(cells)
    numeric = set(range(1, len(columns) - 2))
    return _table(columns, rows, numeric=numeric)


def _inputs(model: Mapping[str, Any]) -> str:
    """What the model ran on, flagged when synthetic data drove operators whose work depends on data."""
    text = escape(describe_inputs(model))
    return (
        f'<span class="warn">{text}</span>'
        if model.get("inputs") == "synthetic" and model.get("data_dependent_ops")
        else text
    )


def _load(model: Mapping[str, Any]) -> str:
    if "load_error" in model:
        return f'<span class="bad" title="{escape(model["load_error"])}">failed</span>'
    return escape(format_seconds(model.get("load_s")))


def _bricks_table(report: Mapping[str, Any]) -> str:
    """The bricks that cost the most time over all models (time per run times uses)."""
    bricks = [b for b in report["bricks"] if b.get("time_s") is not None]
    if not bricks:
        return "<p class=muted>No brick was measured.</p>"
    # What the brick adds to the models' estimates: its work (time less one call) times its uses.
    weight = {b["signature"]: (b.get("work_s") or b["time_s"]) * sum(b["models"].values()) for b in bricks}
    heaviest = sorted(bricks, key=lambda b: -weight[b["signature"]])[:TOP_BRICKS]
    rows = []
    for brick in heaviest:
        users = ", ".join(f"{_short(path)} x{count}" for path, count in brick["models"].items())
        rows.append(
            [
                f"<code>{escape(brick.get('label') or brick['signature'][:8])}</code>",
                escape(users),
                escape(format_seconds(brick["time_s"])),
                escape(format_seconds(weight[brick["signature"]])),
                escape(format_flops(brick.get("flops")))
                if brick.get("flops") is not None
                else f'<span class="warn">unknown ({escape(", ".join(brick.get("unknown_flops_ops", [])))})</span>',
                escape(format_rate(brick.get("flops_per_s"))),
                _bar(brick.get("peak_fraction")),
            ]
        )
    columns = ["Brick", "Used by", "Time", "Time in models", "FLOPs", "GFLOP/s", "Of peak"]
    note = f"<p class=muted>The {len(heaviest)} bricks that cost the most over all models, heaviest first.</p>"
    return note + _table(columns, rows, numeric={2, 3, 4, 5})


def _model_details(model: Mapping[str, Any]) -> str:
    title = f"{escape(model['path'])} <span class=muted>{escape(format_seconds(model['sequential_s']))}"
    title += f", load {escape(format_seconds(model.get('load_s')))}</span>"
    op_time = _op_times(model)
    if not op_time:
        return (
            f"<details><summary>{title}</summary><p class=muted>Incomplete: not every brick was measured.</p></details>"
        )
    total = sum(op_time.values())
    op_rows = [[escape(op), escape(format_seconds(s)), _bar(s / total if total else None)] for op, s in op_time.items()]
    brick_rows = [
        [
            f"<code>{escape(brick['label'] or brick['signature'][:8])}</code>",
            str(brick["count"]),
            escape(format_seconds(brick["time_s"])),
            _bar(brick["share"]),
        ]
        for brick in model["top_bricks"]
    ]
    ops = _table(["Operator type", "Time", "Share"], op_rows, numeric={1})
    top = _table(["Brick", "Uses", "Time in model", "Share"], brick_rows, numeric={1, 2})
    return (
        f"<details><summary>{title}</summary><div class=columns>"
        f"<div><h3>Time by operator type</h3>{ops}</div><div><h3>Top bricks</h3>{top}</div></div></details>"
    )


def _settings(report: Mapping[str, Any]) -> str:
    settings = dict(report.get("settings", {}))
    machine = dict(report.get("machine") or {})
    peak = report.get("peak")
    if peak:
        machine["GEMM peak"] = f"{format_rate(peak['flops_per_s'])} GFLOP/s ({peak.get('gemm', '')})"
        machine["bandwidth"] = f"{peak['bytes_per_s'] / 1e9:.1f} GB/s ({peak.get('bandwidth', '')})"
    else:
        machine["peak"] = "not measured: no brick was timed"
    return (
        f"<div class=columns><div><h3>Settings</h3>{_definitions(settings)}</div>"
        f"<div><h3>Machine</h3>{_definitions(machine)}</div></div>"
    )


def _notes() -> str:
    return (
        "<h2>How to read it</h2><p class=muted>FLOPs are counted from each layer's operator and shapes"
        " (a multiply-add is 2); layers moving data count 0, and operators the counter does not know"
        " (control flow, other custom operators) are unknown, so a model's GFLOP/s leaves out its bricks of"
        " unknown FLOPs. A model's time counts each brick's time less one inference call, and the model's"
        " own call once. A brick of several layers shares its time among them by a roofline estimate from"
        " the measured peak and bandwidth. A brick can pass 100% of the peak where its layer runs better"
        " than the probe's 512x512 GEMM. Load is onnxruntime's session creation time for the model file,"
        f" measured once in this run.</p><p class=muted>pytest-dlbricks {escape(__version__)}</p>\n"
    )


# -- helpers -------------------------------------------------------------------------------------
