"""Where onnxruntime ran a brick: the execution provider of every node, read from one profiled run.

A session is given providers in order of preference, but which one runs a node is onnxruntime's
decision, known only once it ran: its profile names the provider of every node it executed. The
profile also shows the casts onnxruntime inserts around an operator its provider has no float16
kernel for (``InsertedPrecisionFreeCast_*``): such a brick does not run in float16 there.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Name prefix of the casts onnxruntime inserts to run float16 operators in float32.
INSERTED_CAST_PREFIX = "InsertedPrecisionFreeCast"


@dataclass(frozen=True)
class ExecutedNode:
    name: str
    op: str
    provider: str
    #: Element types of the node's inputs as the profile names them (``float``, ``float16``, ...).
    input_types: tuple[str, ...]


@dataclass(frozen=True)
class Placement:
    """The nodes of one run, in the order they ran."""

    nodes: Sequence[ExecutedNode]

    @property
    def providers(self) -> dict[str, int]:
        """Nodes run by each provider, the busiest first."""
        return dict(Counter(node.provider for node in self.nodes).most_common())

    @property
    def provider(self) -> str:
        """The provider that ran the brick, or ``A+B`` when several shared it (the busiest first)."""
        return "+".join(self.providers)

    def float16_fallback(self) -> str | None:
        """Why the brick did not run in float16, or None: the operators onnxruntime ran in float32."""
        if not any(node.name.startswith(INSERTED_CAST_PREFIX) for node in self.nodes):
            return None
        widened = [
            node
            for node in self.nodes
            if not node.name.startswith(INSERTED_CAST_PREFIX) and "float" in node.input_types
        ]
        ops = ", ".join(dict.fromkeys(node.op for node in widened)) or "some operators"
        providers = ", ".join(dict.fromkeys(node.provider for node in widened)) or self.provider
        return f"{providers} has no float16 kernel for {ops}: onnxruntime would run it in float32 between casts"


def read_profile(path: Path) -> Placement:
    """The executed nodes of an onnxruntime profile file (a JSON list of trace events)."""
    return placement_of(json.loads(path.read_text(encoding="utf-8")))


def kernel_events(events: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """An onnxruntime profile's events of node kernels, one per node and run."""
    return [e for e in events if e.get("cat") == "Node" and str(e.get("name", "")).endswith("_kernel_time")]


def placement_of(events: Sequence[Mapping[str, Any]]) -> Placement:
    """The executed nodes of an onnxruntime profile's trace events."""
    nodes = []
    for event in kernel_events(events):
        args = event.get("args", {})
        types = tuple(next(iter(entry)) for entry in args.get("input_type_shape", []) if entry)
        nodes.append(
            ExecutedNode(
                name=event["name"].removesuffix("_kernel_time"),
                op=str(args.get("op_name", "")),
                provider=str(args.get("provider", "")),
                input_types=types,
            )
        )
    return Placement(tuple(nodes))
