"""What a brick's model must not do at its edges that its layers do not do inside the model: copy a view.

A view layer (Reshape, Flatten, Squeeze, Unsqueeze, Identity) changes its tensor's shape, not its data, and
onnxruntime hands its input's memory on as its output inside a model. A model's own output must have memory of
its own, so a brick whose last layer is a view copies the tensor there: a Reshape of 65,536 numbers cost 3,040
instructions inside a model and 266,387 as its output, and on the onnx wheel's light ShuffleNet at G=2 such
copies put the composed instructions 5.4% over the whole model's. So the brick's model that is counted gives
the view's input as its output instead: the view still runs, on a tensor the model reads no more, as inside the
model.
"""

from __future__ import annotations

import onnx
from onnx import helper

#: ONNX operators whose output is their input's data under another shape.
VIEW_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"})


def with_views_inside(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with every output that a view makes of a tensor another layer of the model makes (through a
    row of views, the first one's input) replaced by that tensor."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    while (view := _view_making_an_output(graph)) is not None:
        position = [output.name for output in graph.output].index(view.output[0])
        elem_type = graph.output[position].type.tensor_type.elem_type
        graph.output.remove(graph.output[position])
        graph.output.insert(position, helper.make_tensor_value_info(view.input[0], elem_type, None))
    return model


def _view_making_an_output(graph: onnx.GraphProto) -> onnx.NodeProto | None:
    outputs = {output.name for output in graph.output}
    made = {name for node in graph.node for name in node.output}
    for node in graph.node:
        is_view = node.domain in ("", "ai.onnx") and node.op_type in VIEW_OPS
        if is_view and node.output[0] in outputs and node.input[0] in made and node.input[0] not in outputs:
            return node
    return None
