"""What a brick's call shares of its memory, and what it must not do at its edges: copy a view.

A view layer (Reshape, Flatten, Squeeze, Unsqueeze, Identity) changes its tensor's shape, not its data, and
onnxruntime hands its input's memory on as its output inside a model. A model's own output must have memory of
its own, so a brick whose last layer is a view copies the tensor there: a Reshape of 65,536 numbers cost 3,040
instructions inside a model and 266,387 as its output, and on the onnx wheel's light ShuffleNet at G=2 such
copies put the composed instructions 5.4% over the whole model's. So the brick's model that is counted gives
the view's input as its output instead: the view still runs, on a tensor the model reads no more, as inside the
model.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import onnx
from onnx import helper

#: ONNX operators whose output is their input's data under another shape.
VIEW_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"})


def with_views_inside(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with its outputs as :func:`outputs_with_views_inside` gives them."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    names = [output.name for output in graph.output]
    for position, (name, kept) in enumerate(zip(names, outputs_with_views_inside(graph.node, names))):
        if kept != name:
            elem_type = graph.output[position].type.tensor_type.elem_type
            graph.output[position].CopyFrom(helper.make_tensor_value_info(kept, elem_type, None))
    return model


def outputs_with_views_inside(nodes: Sequence[onnx.NodeProto], outputs: Sequence[str]) -> list[str]:
    """``outputs`` with every one that a view makes of a tensor another layer makes (through a row of views, the
    first one's input) replaced by that tensor."""
    made = {name for node in nodes for name in node.output}
    view_of = {node.output[0]: node.input[0] for node in nodes if _is_view(node)}
    kept = list(outputs)
    changed = True
    while changed:
        changed = False
        for position, name in enumerate(kept):
            source = view_of.get(name)
            if source is not None and source in made and source not in kept:
                kept[position], changed = source, True
    return kept


def shared_tensors(nodes: Sequence[onnx.NodeProto], outputs: Iterable[str]) -> int:
    """How many tensors the layers make that onnxruntime places in the memory a call's tensors share: all but
    the call's outputs (memory of their own) and views' (their input's memory)."""
    own = set(outputs)
    return sum(1 for node in nodes if not _is_view(node) for name in node.output if name and name not in own)


def _is_view(node: onnx.NodeProto) -> bool:
    return node.domain in ("", "ai.onnx") and node.op_type in VIEW_OPS
