"""Sphinx directives that write the reference from the code itself, so that it cannot drift from it.

``.. dlbricks-options::`` is the one table of every flag and ini value, made from the plugin's own
``pytest_addoption``: it is given a parser that takes the same calls pytest's ``Parser`` takes
(``getgroup``, ``addoption``, ``addini``) and keeps them, and each help text is expanded by argparse's
rules, as ``pytest --help`` shows it. ``.. dlbricks-cli::`` is the ``--help`` of every command of
``python -m pytest_dlbricks``. The text is made without Sphinx (tests/test_docs.py checks it against
``pytest --help``); Sphinx is imported only by :func:`setup`.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Flag:
    """A command-line option as ``pytest --help`` shows it."""

    names: tuple[str, ...]
    metavar: str | None
    optional_value: bool
    help: str


@dataclass(frozen=True)
class Ini:
    """An ini value as ``pytest --help`` lists it."""

    name: str
    type: str
    help: str


class RecordingParser:
    """Takes the calls a plugin's ``pytest_addoption`` makes on pytest's ``Parser`` and on its option groups."""

    def __init__(self) -> None:
        self.flags: list[Flag] = []
        self.inis: list[Ini] = []

    def getgroup(self, name: str, description: str = "", after: str | None = None) -> RecordingParser:
        return self

    def addoption(self, *names: str, **attrs: Any) -> None:
        action = argparse.ArgumentParser(add_help=False).add_argument(*names, **attrs)  # argparse checks attrs
        help_text = (action.help or "") % dict(vars(action))  # as argparse expands it for --help
        metavar = action.metavar if isinstance(action.metavar, str) else None  # a tuple names several values
        self.flags.append(Flag(tuple(names), metavar, action.nargs == "?", help_text))

    def addini(self, name: str, help: str, type: Any = None, default: Any = None, **_: Any) -> None:
        self.inis.append(Ini(name, type if isinstance(type, str) else "string" if type is None else "text", help))


def recorded_options() -> RecordingParser:
    """Every flag and ini value the plugin declares, in its order."""
    from pytest_dlbricks import plugin

    parser = RecordingParser()
    plugin.pytest_addoption(parser)  # type: ignore[arg-type]
    return parser


def _text(value: str) -> str:
    """Help text as reStructuredText: flags it names as literals (with the value given them, which a literal's
    end cannot be followed by), markup characters in the rest escaped."""
    parts = re.split(r"(--[a-z][a-z0-9-]*(?:=[\w%.:/-]*[\w%])?)", value)
    return "".join(
        f"``{part}``" if index % 2 else re.sub(r"([\\*`|_])", r"\\\1", part) for index, part in enumerate(parts)
    )


_INI_NOTE = re.compile(r" Ini: (\w+)\.")
_INI_TYPES = {"bool": "true or false", "linelist": "one per line", "args": "arguments", "paths": "paths"}


def options_rst(parser: RecordingParser) -> str:
    """One list-table of every flag with its ini value, and of any ini value without a flag."""
    rows = []
    inis = {ini.name: ini for ini in parser.inis}
    paired = set()
    for flag in parser.flags:
        value = f"=[{flag.metavar}]" if flag.optional_value else f"={flag.metavar}" if flag.metavar else ""
        names = ", ".join(f"``{name}{value}``" for name in flag.names)
        note = _INI_NOTE.search(flag.help)
        ini = inis.get(note.group(1)) if note else None
        meaning = _INI_NOTE.sub("", flag.help) if ini else flag.help
        if ini:
            paired.add(ini.name)
        rows.append((names, _ini_cell(ini) if ini else "(flag only)", _text(meaning)))
    for ini in parser.inis:
        if ini.name not in paired:
            rows.append(("(ini only)", _ini_cell(ini), _text(ini.help)))
    lines = [".. list-table::", "   :header-rows: 1", "   :widths: 30 22 48", ""]
    for row in [("Flag", "Ini", "Meaning"), *rows]:
        lines.append(f"   * - {row[0]}")
        lines.extend(f"     - {cell}" for cell in row[1:])
    return "\n".join(lines) + "\n"


def _ini_cell(ini: Ini) -> str:
    kind = _INI_TYPES.get(ini.type)
    return f"``{ini.name}``" + (f" ({kind})" if kind else "")


def cli_rst(width: int = 100) -> str:
    """The ``--help`` of ``python -m pytest_dlbricks`` and of each of its commands, as literal blocks."""
    from pytest_dlbricks.wiring import cli

    blocks = []
    for arguments in ([], ["compose"], ["merge"], ["report"]):
        title = " ".join(["python -m pytest_dlbricks", *arguments])
        out = io.StringIO()
        previous = os.environ.get("COLUMNS")
        os.environ["COLUMNS"] = str(width)  # argparse wraps its help to the terminal's width
        try:
            with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
                cli.build_parser().parse_args([*arguments, "--help"])
        finally:
            if previous is None:
                del os.environ["COLUMNS"]
            else:
                os.environ["COLUMNS"] = previous
        body = "\n".join(f"    {line}".rstrip() for line in out.getvalue().splitlines())
        blocks.append(f"``{title} --help``::\n\n{body}\n")
    return "\n".join(blocks)


def setup(app: Any) -> dict[str, Any]:
    from docutils import nodes
    from docutils.statemachine import StringList
    from sphinx.util.docutils import SphinxDirective

    def directive(make: Any) -> type[SphinxDirective]:
        class Generated(SphinxDirective):
            def run(self) -> list[Any]:
                container = nodes.container()
                self.state.nested_parse(StringList(make().splitlines(), source=self.name), 0, container)
                return list(container.children)

        return Generated

    app.add_directive("dlbricks-options", directive(lambda: options_rst(recorded_options())))
    app.add_directive("dlbricks-cli", directive(cli_rst))
    return {"parallel_read_safe": True, "parallel_write_safe": True}
