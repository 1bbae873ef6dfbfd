"""The zoo's manifest (``zoo.json``, written by ``bench/zoo/build.py``) as the bench scripts read it: which models
to run, and the ``--dlbricks-dim`` patterns that give each model its own sizes in one pytest session."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path


def read_manifest(cache: Path) -> tuple[Path, list[dict]]:
    """The manifest's path under ``cache`` and every model it lists; exits with a message where there is none."""
    path = cache.expanduser() / "zoo.json"
    if not path.exists():
        sys.exit(f"{path} not found: build the zoo first with python bench/zoo/build.py")
    return path, json.loads(path.read_text())["models"]


def select(manifest: Path, entries: list[dict], subset: str, only: str | None = None) -> list[dict]:
    """The models of ``subset``, or those named in ``only`` (comma-separated, in the manifest's order); exits
    naming the ones the manifest lacks."""
    if not only:
        return [m for m in entries if subset in m["subsets"]]
    names = set(only.split(","))
    if missing := names - {m["name"] for m in entries}:
        sys.exit(f"not in {manifest}: {', '.join(sorted(missing))}")
    return [m for m in entries if m["name"] in names]


def dim_options(path: Path, dims: Mapping[str, int], skip: str | None = None) -> list[str]:
    """The ``--dlbricks-dim`` pattern giving the model at ``path`` (matched by its folder and file name) its
    ``dims`` but ``skip``; none where nothing is left to give."""
    given = " ".join(f"{name}={value}" for name, value in dims.items() if name != skip)
    return [f"--dlbricks-dim={path.parent.name}/{path.name}: {given}"] if given else []
