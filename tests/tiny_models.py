"""Tiny ONNX models built in memory for the unit tests, each shaped to exercise one feature of the method.

Every builder writes its model into a given directory and returns the path, so tests load it exactly
as the plugin does (from a file). Models use opset 17 and IR version 8 unless a builder says otherwise:
onnx 1.23's ``helper.make_model`` stamps an IR version that onnxruntime 1.31 rejects.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8
FLOAT = TensorProto.FLOAT
INT64 = TensorProto.INT64
STRING = TensorProto.STRING
BOOL = TensorProto.BOOL


def finish(
    nodes: Sequence[onnx.NodeProto],
    inputs: Sequence[onnx.ValueInfoProto],
    outputs: Sequence[onnx.ValueInfoProto],
    initializers: Sequence[onnx.TensorProto] = (),
    *,
    opset: int = OPSET,
    ir_version: int = IR_VERSION,
) -> onnx.ModelProto:
    """A model from graph parts, with an opset and IR version onnxruntime 1.31 accepts."""
    graph = helper.make_graph(list(nodes), "tiny", list(inputs), list(outputs), initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="tests")
    model.ir_version = ir_version
    return model


def save(model: onnx.ModelProto, directory: Path, name: str) -> Path:
    """Write ``model`` as ``directory/name`` (no checks: broken models are wanted too)."""
    path = directory / name
    path.write_bytes(model.SerializeToString())
    return path


def tensor(name: str, shape: Sequence[int | str | None], dtype: int = FLOAT) -> onnx.ValueInfoProto:
    """A graph input or output declaration (strings are symbolic dimensions)."""
    return helper.make_tensor_value_info(name, dtype, list(shape))


def array(name: str, values: np.ndarray) -> onnx.TensorProto:
    """An initializer."""
    return numpy_helper.from_array(np.asarray(values), name)


#: A channel count no NCHWc block divides (8 channels with AVX2, 16 with AVX-512): a chain of it runs as it is on any
#: processor, where with 8 channels an AVX2 machine lays it out in blocks between reorders, and its bricks differ.
UNBLOCKED_CHANNELS = 6


def chain_model(
    *,
    blocks: int = 3,
    channels: int = 8,
    size: int = 6,
    seed: int = 0,
    prefix: str = "",
    kernel: int = 3,
    bias: bool = False,
) -> onnx.ModelProto:
    """``blocks`` times Conv(kernel, same padding) then Relu: every Conv+Relu pair is the same brick.

    ``prefix`` renames every value and ``seed`` changes every weight, so two models can hold the same
    layers under different names and weights. Conv weights have ``channels**2 * kernel**2`` elements,
    more than the loader keeps real values of, so they count as weights to synthesise.
    """
    rng = np.random.default_rng(seed)
    nodes: list[onnx.NodeProto] = []
    initializers: list[onnx.TensorProto] = []
    current = f"{prefix}x"
    for block in range(blocks):
        weight, conv, relu = (f"{prefix}w{block}", f"{prefix}conv{block}", f"{prefix}relu{block}")
        initializers.append(array(weight, rng.standard_normal((channels, channels, kernel, kernel)).astype(np.float32)))
        conv_inputs = [current, weight]
        if bias:
            initializers.append(array(f"{weight}_b", rng.standard_normal(channels).astype(np.float32)))
            conv_inputs.append(f"{weight}_b")
        pad = kernel // 2
        nodes.append(helper.make_node("Conv", conv_inputs, [conv], name=f"{prefix}Conv{block}", pads=[pad] * 4))
        nodes.append(helper.make_node("Relu", [conv], [relu], name=f"{prefix}Relu{block}"))
        current = relu
    shape = [1, channels, size, size]
    return finish(nodes, [tensor(f"{prefix}x", shape)], [tensor(current, shape)], initializers)


def chain(directory: Path, name: str = "chain.onnx", **options: Any) -> Path:
    """:func:`chain_model` saved to ``directory``."""
    return save(chain_model(**options), directory, name)


def diamond(directory: Path) -> Path:
    """Relu, then two parallel branches (Sigmoid; Tanh then Neg) joined by Add.

    Layers in order: 0 Relu, 1 Sigmoid, 2 Tanh, 3 Neg, 4 Add. With one layer per brick the critical
    path is Relu + max(Sigmoid, Tanh + Neg) + Add, less than the sum of all five.
    """
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Sigmoid", ["a"], ["left"]),
        helper.make_node("Tanh", ["a"], ["t"]),
        helper.make_node("Neg", ["t"], ["right"]),
        helper.make_node("Add", ["left", "right"], ["y"]),
    ]
    return save(finish(nodes, [tensor("x", [1, 64])], [tensor("y", [1, 64])]), directory, "diamond.onnx")


def elementwise_row(
    directory: Path, *, ops: Sequence[str] = ("Relu", "Sigmoid", "Tanh", "Neg", "Abs", "Exp"), width: int = 64
) -> Path:
    """``ops`` one after the other on ``width`` floats (64: layers of a few microseconds on any machine, each its
    own brick)."""
    names = ["x", *(f"v{index}" for index in range(len(ops)))]
    nodes = [helper.make_node(op, [names[i]], [names[i + 1]], name=f"{op}{i}") for i, op in enumerate(ops)]
    shape = [1, width]
    return save(finish(nodes, [tensor("x", shape)], [tensor(names[-1], shape)]), directory, "elementwise_row.onnx")


def symbolic_batch(directory: Path) -> Path:
    """MatMul by a ``[4, 32]`` weight, then Relu, on an input ``[batch, 4]`` whose ``batch`` is symbolic."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])]
    weight = array("w", np.full((4, 32), 0.5, dtype=np.float32))
    return save(
        finish(nodes, [tensor("x", ["batch", 4])], [tensor("y", ["batch", 32])], [weight]),
        directory,
        "symbolic.onnx",
    )


def old_ir_constant_of_shape(directory: Path) -> Path:
    """IR 3 / opset 9 like onnx's light models: Conv weights built at run time by ConstantOfShape.

    The shape tensor is an initializer that is also listed as a graph input (required before IR 4).
    Nodes: ConstantOfShape (a constant, not a layer), Conv, Relu: two layers.
    """
    shape = array("w_shape", np.array([8, 3, 3, 3], dtype=np.int64))
    nodes = [
        helper.make_node("ConstantOfShape", ["w_shape"], ["w"], value=helper.make_tensor("v", FLOAT, [1], [0.01])),
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    inputs = [tensor("x", [1, 3, 8, 8]), tensor("w_shape", [4], INT64)]
    model = finish(nodes, inputs, [tensor("y", [1, 8, 8, 8])], [shape], opset=9, ir_version=3)
    return save(model, directory, "old_ir.onnx")


def computed_reshape(directory: Path) -> Path:
    """Reshape ``x[2, 3, 4]`` to ``[2, 12]`` with the target shape computed from the input at run time.

    Shape -> Gather(0) -> Unsqueeze, then Concat with a constant ``[-1]``: the Concat output
    ``target`` is an int64 tensor that steers the Reshape, so a brick must see ``[2, -1]`` and not
    zeros. Layers: Shape, Gather, Unsqueeze, Concat, Reshape, Relu.
    """
    initializers = [
        array("zero", np.array(0, dtype=np.int64)),
        array("axes", np.array([0], dtype=np.int64)),
        array("minus_one", np.array([-1], dtype=np.int64)),
    ]
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["first"], axis=0),
        helper.make_node("Unsqueeze", ["first", "axes"], ["first_1d"]),
        helper.make_node("Concat", ["first_1d", "minus_one"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"]),
        helper.make_node("Relu", ["flat"], ["y"]),
    ]
    model = finish(nodes, [tensor("x", [2, 3, 4])], [tensor("y", [2, 12])], initializers)
    return save(model, directory, "reshape.onnx")


def scalar_range(directory: Path) -> Path:
    """``Range(0, size of x's first axis, 1)`` cast to float and added to ``x``: a 0-d int64 steers it.

    ``n`` (Gather of Shape with a 0-d index) is a 0-d activation; its real value 5 sets Range's output
    length, and a brick must receive it as a 0-d tensor. Layers: Shape, Gather, Range, Cast, Add.
    """
    initializers = [array("index", np.array(0, dtype=np.int64)), array("start", np.array(0, dtype=np.int64))]
    initializers.append(array("step", np.array(1, dtype=np.int64)))
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "index"], ["n"], axis=0),
        helper.make_node("Range", ["start", "n", "step"], ["positions"]),
        helper.make_node("Cast", ["positions"], ["positions_f"], to=FLOAT),
        helper.make_node("Add", ["x", "positions_f"], ["y"]),
    ]
    model = finish(nodes, [tensor("x", [5])], [tensor("y", [5])], initializers)
    return save(model, directory, "range.onnx")


def symbolic_positions(directory: Path) -> Path:
    """``x[n]`` (``n`` symbolic) through onnxruntime's Gelu, plus ``Range(0, size of its first axis, 1)``.

    onnx's shape inference does not know the com.microsoft Gelu, so the size Gather takes from Shape is
    learned from the reference run alone. Layers: Gelu, Shape, Gather, Range, Cast, Add.
    """
    initializers = [array("index", np.array(0, dtype=np.int64)), array("start", np.array(0, dtype=np.int64))]
    initializers.append(array("step", np.array(1, dtype=np.int64)))
    nodes = [
        helper.make_node("Gelu", ["x"], ["g"], domain="com.microsoft"),
        helper.make_node("Shape", ["g"], ["shape"]),
        helper.make_node("Gather", ["shape", "index"], ["n"], axis=0),
        helper.make_node("Range", ["start", "n", "step"], ["positions"]),
        helper.make_node("Cast", ["positions"], ["positions_f"], to=FLOAT),
        helper.make_node("Add", ["g", "positions_f"], ["y"]),
    ]
    model = finish(nodes, [tensor("x", ["n"])], [tensor("y", ["n"])], initializers)
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return save(model, directory, "positions.onnx")


def loop_outer_scope(directory: Path, *, trips: int = 3, inner: str = "acc", body_seed: int | None = None) -> Path:
    """Relu, then a Loop of ``trips`` iterations whose body adds the outer-scope Relu output ``r``.

    ``r`` is not a Loop input: the Loop brick must still take it as an input, renamed inside the body.
    ``inner`` names the body's own values; ``body_seed`` adds a body weight (a Constant ``[4, 8]``
    multiplied in) with values from that seed. Layers: Relu, Loop, Sigmoid.
    """
    body_nodes = [
        helper.make_node("Identity", ["cond_in"], ["cond_out"], name=f"{inner}_identity"),
        helper.make_node("Add", [f"{inner}_in", "r"], [f"{inner}_sum"], name=f"{inner}_add"),
    ]
    if body_seed is None:
        body_nodes.append(helper.make_node("Identity", [f"{inner}_sum"], [f"{inner}_out"]))
    else:
        scale = np.random.default_rng(body_seed).uniform(0.5, 1.5, (4, 8)).astype(np.float32)
        body_nodes.append(helper.make_node("Constant", [], [f"{inner}_scale"], value=array("s", scale)))
        body_nodes.append(helper.make_node("Mul", [f"{inner}_sum", f"{inner}_scale"], [f"{inner}_out"]))
    body = helper.make_graph(
        body_nodes,
        f"{inner}_body",
        [tensor(f"{inner}_i", [], INT64), tensor("cond_in", [], BOOL), tensor(f"{inner}_in", [4, 8])],
        [tensor("cond_out", [], BOOL), tensor(f"{inner}_out", [4, 8])],
    )
    initializers = [array("trips", np.array(trips, dtype=np.int64)), array("keep_going", np.array(True))]
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Loop", ["trips", "keep_going", "x"], ["looped"], body=body),
        helper.make_node("Sigmoid", ["looped"], ["y"]),
    ]
    model = finish(nodes, [tensor("x", [4, 8])], [tensor("y", [4, 8])], initializers)
    return save(model, directory, f"loop_{inner}_{body_seed}.onnx")


def if_outer_scope(directory: Path) -> Path:
    """``If(flag)`` whose branches read the outer-scope values ``a`` and ``b`` computed before it.

    ``flag`` is a bool model input. Layers: Relu (a), Sigmoid (b), If.
    """
    then_branch = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["then_out"])], "then", [], [tensor("then_out", [4, 8])]
    )
    else_branch = helper.make_graph(
        [helper.make_node("Mul", ["a", "b"], ["else_out"])], "else", [], [tensor("else_out", [4, 8])]
    )
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Sigmoid", ["x"], ["b"]),
        helper.make_node("If", ["flag"], ["y"], then_branch=then_branch, else_branch=else_branch),
    ]
    inputs = [tensor("x", [4, 8]), tensor("flag", [], BOOL)]
    return save(finish(nodes, inputs, [tensor("y", [4, 8])]), directory, "if.onnx")


def external_weights(directory: Path) -> Path:
    """:func:`chain_model` with its weights in ``weights.bin`` beside the model file."""
    model = chain_model(blocks=2, bias=True)
    path = directory / "external.onnx"
    onnx.save_model(
        model,
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="weights.bin",
        size_threshold=0,
    )
    return path


def dead_end(directory: Path) -> Path:
    """Relu feeding the output, and a Sigmoid of the input that nothing reads (a dead layer)."""
    nodes = [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Sigmoid", ["x"], ["unused"])]
    return save(finish(nodes, [tensor("x", [1, 8])], [tensor("y", [1, 8])]), directory, "dead_end.onnx")


def sequence_boundary(directory: Path) -> Path:
    """Relu, then SplitToSequence and SequenceAt: the sequence between them is no tensor, so it can
    never cross a brick boundary (the real case of DLBricks' Algorithm 2 fallback)."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("SplitToSequence", ["r"], ["parts"], axis=0, keepdims=1),
        helper.make_node("SequenceAt", ["parts", "index"], ["y"]),
    ]
    index = helper.make_tensor("index", TensorProto.INT64, [], [0])
    model = finish(nodes, [tensor("x", [2, 8])], [tensor("y", [1, 8])], initializers=[index])
    return save(model, directory, "sequence_boundary.onnx")


def single_layer(directory: Path, op: str, shape: Sequence[int], name: str = "single.onnx", **attributes: Any) -> Path:
    """One elementwise layer ``op`` on an input of ``shape``: the smallest model a brick can differ in."""
    node = helper.make_node(op, ["x"], ["y"], **attributes)
    return save(finish([node], [tensor("x", shape)], [tensor("y", shape)]), directory, name)


#: Elementwise operators of one input, candidates for one the installed runtime has no kernel for.
UNARY_OPS = ("Relu", "Softplus", "Softsign", "Acos", "Asin", "Atan", "Cosh", "Sinh", "Tan", "Asinh", "Acosh", "Atanh")


def op_without_kernel(dtype: int) -> str:
    """An operator of :data:`UNARY_OPS` that onnxruntime's CPU provider runs in float32 but not in ``dtype``.

    Probed on the installed onnxruntime, not written down, so a release that adds kernels does not
    break the tests that need a missing one. Lacking a kernel shows either as a refusal to load or, for
    float16, as the ``Cast`` nodes onnxruntime inserts to run the operator in float32. Skips the test
    when every candidate has a kernel.
    """
    import tempfile

    import onnxruntime
    import pytest

    from pytest_dlbricks.core.runtime import new_options

    def runs_natively(op: str, elem_type: int) -> bool:
        node = helper.make_node(op, ["x"], ["y"])
        model = finish([node], [tensor("x", [2, 8], elem_type)], [tensor("y", [2, 8], elem_type)])
        with tempfile.TemporaryDirectory() as folder:
            options = new_options()  # as the plugin's sessions, once the process shares a thread pool
            options.optimized_model_filepath = str(Path(folder, "optimized.onnx"))
            options.log_severity_level = 3  # its warning about hardware-specific optimizations is expected
            try:
                onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
            except Exception:  # onnxruntime's exception types are not part of its API
                return False
            optimized = onnx.load(options.optimized_model_filepath)
        return all(node.op_type != "Cast" for node in optimized.graph.node)

    for op in UNARY_OPS:
        if runs_natively(op, FLOAT) and not runs_natively(op, dtype):
            return op
    pytest.skip(f"onnxruntime's CPU provider runs every one of {UNARY_OPS} in {TensorProto.DataType.Name(dtype)}")


def sparse_weights(directory: Path) -> Path:
    """Add a sparse float weight, then Reshape by a sparse int64 shape: weights as ``sparse_initializer``,
    which onnx's checker and onnxruntime accept, the shape a value that steers computation."""
    weight = helper.make_sparse_tensor(
        helper.make_tensor("bias", FLOAT, [2], [1.0, 2.0]), helper.make_tensor("bias_at", INT64, [2], [0, 5]), [2, 4]
    )
    shape = helper.make_sparse_tensor(
        helper.make_tensor("shape", INT64, [2], [4, 2]), helper.make_tensor("shape_at", INT64, [2], [0, 1]), [2]
    )
    nodes = [
        helper.make_node("Add", ["x", "bias"], ["a"]),
        helper.make_node("Reshape", ["a", "shape"], ["r"]),
        helper.make_node("Relu", ["r"], ["y"]),
    ]
    model = finish(nodes, [tensor("x", [2, 4])], [tensor("y", [4, 2])])
    model.graph.sparse_initializer.extend([weight, shape])
    return save(model, directory, "sparse_weights.onnx")


#: Every builder of a model that loads and cuts, by a short name for test ids.
def weights_as_inputs(
    directory: Path, *, listed: bool = True, blocks: int = 3, channels: int = 16, size: int = 16, ir_version: int = 4
) -> Path:
    """Conv (with bias) then Relu, ``blocks`` times, each weight also listed as a graph input, as old exporters
    (PyTorch 1.2, opset 9) wrote them; ``listed=False`` gives the same model with plain initializers.

    From IR 4 on, onnxruntime takes such weights as inputs a caller may override: no constant folding, no
    pre-packing, no NCHWc convolutions. Before IR 4 (``ir_version=3``) every initializer is listed, and constant.
    """
    model = chain_model(blocks=blocks, channels=channels, size=size, bias=True)
    model.ir_version = ir_version
    model.ClearField("opset_import")
    model.opset_import.append(helper.make_opsetid("", 9))
    if listed:
        model.graph.input.extend(tensor(weight.name, list(weight.dims)) for weight in model.graph.initializer)
    return save(model, directory, "weights_as_inputs.onnx" if listed else "weights_plain.onnx")


BUILDERS: dict[str, Callable[[Path], Path]] = {
    "chain": chain,
    "diamond": diamond,
    "symbolic": symbolic_batch,
    "old_ir": old_ir_constant_of_shape,
    "reshape": computed_reshape,
    "range": scalar_range,
    "loop": loop_outer_scope,
    "if": if_outer_scope,
    "sparse": sparse_weights,
    "weights_as_inputs": weights_as_inputs,
}


def rms_norm(directory: Path) -> Path:
    """RMS normalisation of ``x[1, 8, 64]``: onnxruntime fuses it into SimplifiedLayerNormalization, which it
    writes in the default domain, where onnx's checker knows no such operator."""
    nodes = [
        helper.make_node("Pow", ["x", "two"], ["squared"]),
        helper.make_node("ReduceMean", ["squared"], ["mean"], axes=[-1]),
        helper.make_node("Add", ["mean", "eps"], ["shifted"]),
        helper.make_node("Sqrt", ["shifted"], ["root"]),
        helper.make_node("Div", ["x", "root"], ["normed"]),
        helper.make_node("Mul", ["normed", "gamma"], ["y"]),
    ]
    weights = [
        array("two", np.array(2.0, np.float32)),
        array("eps", np.array(1e-6, np.float32)),
        array("gamma", np.ones(64, np.float32)),
    ]
    model = finish(nodes, [tensor("x", [1, 8, 64])], [tensor("y", [1, 8, 64])], weights)
    return save(model, directory, "rms_norm.onnx")


def if_branch_weight(directory: Path) -> Path:
    """``If(c)``: the then branch adds a weight of its own, ``W[1, 512]`` (2 KiB, large enough for onnxruntime
    to store it as external data of an optimized model); the else branch passes ``x`` on."""
    then_branch = helper.make_graph(
        [helper.make_node("Add", ["x", "W"], ["added"])],
        "then",
        [],
        [tensor("added", [1, 512])],
        [array("W", np.ones((1, 512), np.float32))],
    )
    else_branch = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["same"])], "else", [], [tensor("same", [1, 512])]
    )
    nodes = [helper.make_node("If", ["c"], ["y"], then_branch=then_branch, else_branch=else_branch)]
    model = finish(nodes, [tensor("x", [1, 512]), tensor("c", [], BOOL)], [tensor("y", [1, 512])])
    return save(model, directory, "if_branch_weight.onnx")


def zipmap_classifier(directory: Path, *, string_labels: bool = False) -> Path:
    """scikit-learn's usual export: ``ai.onnx.ml`` LinearClassifier, then ZipMap, whose model output is a
    sequence of maps (no tensor); labels 0, 1, 2, or "a", "b", "c" (a string label and string keys)."""
    labels = {"classlabels_strings": ["a", "b", "c"]} if string_labels else {"classlabels_ints": [0, 1, 2]}
    classifier = helper.make_node(
        "LinearClassifier",
        ["x"],
        ["label", "scores"],
        domain="ai.onnx.ml",
        coefficients=[0.1] * 12,
        intercepts=[0.0, 0.0, 0.0],
        **labels,
    )
    keys = {"classlabels_strings": ["a", "b", "c"]} if string_labels else {"classlabels_int64s": [0, 1, 2]}
    zipmap = helper.make_node("ZipMap", ["scores"], ["probabilities"], domain="ai.onnx.ml", **keys)
    key_type = STRING if string_labels else INT64
    probability = helper.make_tensor_type_proto(FLOAT, [])
    maps = helper.make_sequence_type_proto(helper.make_map_type_proto(key_type, probability))
    graph = helper.make_graph(
        [classifier, zipmap],
        "classifier",
        [tensor("x", [1, 4])],
        [tensor("label", [1], key_type), helper.make_value_info("probabilities", maps)],
    )
    opsets = [helper.make_opsetid("", OPSET), helper.make_opsetid("ai.onnx.ml", 1)]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="tests")
    model.ir_version = IR_VERSION
    return save(model, directory, "zipmap_strings.onnx" if string_labels else "zipmap.onnx")


def tensor_sequence(directory: Path) -> Path:
    """``x`` twice in a sequence of tensors, the model's output."""
    sequence = helper.make_sequence_type_proto(helper.make_tensor_type_proto(FLOAT, [1, 4]))
    nodes = [helper.make_node("SequenceConstruct", ["x", "x"], ["pair"])]
    return save(
        finish(nodes, [tensor("x", [1, 4])], [helper.make_value_info("pair", sequence)]), directory, "sequence.onnx"
    )


def image_conv(directory: Path) -> Path:
    """A 3x3 Conv without padding on ``x[1, 3, height, width]``: onnxruntime refuses images smaller than
    the kernel, such as the 1x1 of dimensions left at their default."""
    weight = array("w", np.ones((4, 3, 3, 3), np.float32))
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Relu", ["c"], ["y"])]
    model = finish(nodes, [tensor("x", [1, 3, "height", "width"])], [tensor("y", [1, 4, "out_h", "out_w"])], [weight])
    return save(model, directory, "image_conv.onnx")


def rate_switch(directory: Path, *, rows: int = 64, width: int = 256, heavy: int = 10) -> Path:
    """A voice-activity-detector's switch: ``If(Equal(sr, 16000))`` runs ``heavy`` MatMuls of ``x``, else one.

    ``x[rows, width]`` float and ``sr`` an int64 scalar; the then-branch does ``heavy`` times the work. The
    branches share a weight of the main graph.
    """

    def branch(name: str, count: int) -> onnx.GraphProto:
        nodes, value = [], "x"
        for index in range(count):
            nodes.append(helper.make_node("MatMul", [value, "w"], [f"{name}_{index}"]))
            value = f"{name}_{index}"
        return helper.make_graph(nodes, name, [], [tensor(value, [rows, width])])

    nodes = [
        helper.make_node("Equal", ["sr", "rate"], ["is_16k"]),
        helper.make_node("If", ["is_16k"], ["y"], then_branch=branch("then", heavy), else_branch=branch("else", 1)),
    ]
    inputs = [tensor("x", [rows, width]), tensor("sr", [], INT64)]
    weights = [array("rate", np.array(16000, np.int64)), array("w", np.full((width, width), 0.01, np.float32))]
    model = finish(nodes, inputs, [tensor("y", [rows, width])], weights)
    return save(model, directory, "vad.onnx")


def batch_squeeze_switch(directory: Path) -> Path:
    """silero-vad's switch on the batch size: ``If(Shape(r)[0] == 1)`` squeezes the batch axis of
    ``r = Relu(x[batch, 8])``, else sums over it; a Sigmoid follows.

    Both give ``[8]``, but the squeeze is valid at a batch of 1 only: at another concrete size, shape
    inference of the branch not taken fails, as onnxruntime runs it when it loads a model.
    """
    then_branch = helper.make_graph([helper.make_node("Squeeze", ["r", "axis"], ["t"])], "then", [], [tensor("t", [8])])
    else_branch = helper.make_graph(
        [helper.make_node("ReduceSum", ["r", "axis"], ["e"], keepdims=0)], "else", [], [tensor("e", [8])]
    )
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Shape", ["r"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["batch"]),
        helper.make_node("Equal", ["batch", "one"], ["single"]),
        helper.make_node("If", ["single"], ["y"], then_branch=then_branch, else_branch=else_branch),
        helper.make_node("Sigmoid", ["y"], ["z"]),
    ]
    weights = [
        array("zero", np.array(0, np.int64)),
        array("one", np.array(1, np.int64)),
        array("axis", np.array([0], np.int64)),
    ]
    model = finish(nodes, [tensor("x", ["batch", 8])], [tensor("z", [8])], weights)
    return save(model, directory, "batch_switch.onnx")


def word_lookup(directory: Path, *, vocabulary: int = 64, width: int = 128) -> Path:
    """Text in, numbers out: ``LabelEncoder`` (ai.onnx.ml) maps ``words: string[n]`` to ids, ``Gather`` their
    embeddings and a MatMul transforms them; the work grows with the number of words."""
    keys = [f"w{index}" for index in range(vocabulary)]
    nodes = [
        helper.make_node(
            "LabelEncoder",
            ["words"],
            ["ids"],
            domain="ai.onnx.ml",
            keys_strings=keys,
            values_int64s=list(range(vocabulary)),
            default_int64=0,
        ),
        helper.make_node("Gather", ["table", "ids"], ["embedded"]),
        helper.make_node("MatMul", ["embedded", "w"], ["y"]),
    ]
    weights = [
        array("table", np.full((vocabulary, width), 0.5, np.float32)),
        array("w", np.full((width, width), 0.01, np.float32)),
    ]
    model = finish(nodes, [tensor("words", ["n"], STRING)], [tensor("y", ["n", width])], weights)
    model.opset_import.append(helper.make_opsetid("ai.onnx.ml", 2))
    return save(model, directory, "words.onnx")


def kept_rows(directory: Path, *, rows: int = 256, width: int = 256) -> Path:
    """A detector's tail: the rows of ``x[rows]`` above 0.5 (``NonZero``) select rows of a table that a MatMul
    transforms, so the output size, and the work, follow the data."""
    nodes = [
        helper.make_node("Greater", ["x", "half"], ["mask"]),
        helper.make_node("NonZero", ["mask"], ["where"]),
        helper.make_node("Squeeze", ["where", "axis0"], ["index"]),
        helper.make_node("Gather", ["table", "index"], ["picked"]),
        helper.make_node("MatMul", ["picked", "w"], ["y"]),
    ]
    weights = [
        array("half", np.array(0.5, np.float32)),
        array("axis0", np.array([0], np.int64)),
        array("table", np.full((rows, width), 0.5, np.float32)),
        array("w", np.full((width, width), 0.01, np.float32)),
    ]
    model = finish(nodes, [tensor("x", [rows])], [tensor("y", ["k", width])], weights)
    return save(model, directory, "detector.onnx")


def constant_scales(directory: Path, *, then: str = "Concat") -> Path:
    """``Relu(x[1,8,16,16])`` upsampled by ``Resize`` with constant float scales [1,1,2,2], then ``Concat``
    with ``skip[1,8,32,32]`` (or a 3x3 ``Conv``): scales are weights that decide a shape."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Resize", ["r", "", "scales"], ["up"], mode="nearest"),
    ]
    inputs = [tensor("x", [1, 8, 16, 16])]
    weights = [array("scales", np.array([1, 1, 2, 2], np.float32))]
    if then == "Concat":
        nodes.append(helper.make_node("Concat", ["up", "skip"], ["y"], axis=1))
        inputs.append(tensor("skip", [1, 8, 32, 32]))
        outputs = [tensor("y", [1, 16, 32, 32])]
    else:
        nodes.append(helper.make_node("Conv", ["up", "W"], ["y"], pads=[1, 1, 1, 1]))
        weights.append(array("W", np.full((8, 8, 3, 3), 0.01, np.float32)))
        outputs = [tensor("y", [1, 8, 32, 32])]
    return save(finish(nodes, inputs, outputs, weights, opset=13), directory, f"resize_{then.lower()}.onnx")


def growing_concats(directory: Path, *, layers: int = 60) -> Path:
    """A row of ``layers`` Concats, each adding one column of a constant: every layer has its own shapes,
    so every layer is a brick of its own, of a few microseconds, each a small part of the model."""
    nodes, initializers = [], []
    current = "x"
    for layer in range(layers):
        column, output = f"c{layer}", f"y{layer}"
        initializers.append(array(column, np.full((1, 1), float(layer), np.float32)))
        nodes.append(helper.make_node("Concat", [current, column], [output], name=f"Concat{layer}", axis=1))
        current = output
    return save(
        finish(nodes, [tensor("x", [1, 4])], [tensor(current, [1, 4 + layers])], initializers),
        directory,
        "growing_concats.onnx",
    )


def channels_last_cnn(directory: Path, *, blocks: int = 2, channels: int = 16, size: int = 16) -> Path:
    """A channels-last network as a PyTorch port of a Keras model exports it: each Conv between a Transpose
    to NCHW and one back, float-to-float Casts around them, batch norm as Sub, Mul and Add over the last
    axis, then Relu. onnxruntime removes the Casts, cancels the Transposes and may convert the Convs to its
    blocked layout with reorders between them and the elementwise layers."""
    rng = np.random.default_rng(0)
    nodes, weights, value = [], [], "x"
    for block in range(blocks):
        cin = 3 if block == 0 else channels
        steps: list[tuple[str, dict[str, Any]]] = [
            ("Transpose", {"perm": [0, 3, 1, 2]}),
            ("Cast", {"to": FLOAT}),
            ("Conv", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
            ("Cast", {"to": FLOAT}),
            ("Transpose", {"perm": [0, 2, 3, 1]}),
            ("Sub", {}),
            ("Mul", {}),
            ("Add", {}),
            ("Relu", {}),
        ]
        for step, (op, attributes) in enumerate(steps):
            inputs, output = [value], f"b{block}_{op.lower()}{step}"
            if op in ("Conv", "Sub", "Mul", "Add"):
                shape = (channels, cin, 3, 3) if op == "Conv" else (channels,)
                weights.append(array(f"{output}_w", rng.standard_normal(shape).astype(np.float32)))
                inputs.append(weights[-1].name)
            nodes.append(helper.make_node(op, inputs, [output], **attributes))
            value = output
    model = finish(nodes, [tensor("x", [1, size, size, 3])], [tensor(value, [1, size, size, channels])], weights)
    return save(model, directory, "channels_last.onnx")


def projections(directory: Path, *, layers: int = 3, width: int = 512) -> Path:
    """A decoder step's projections: ``layers`` MatMuls of a single row by a ``width`` square matrix, then a
    Relu; each MatMul reads a weight of ``width**2`` floats to do two FLOPs per element of it."""
    rng = np.random.default_rng(0)
    nodes, weights, current = [], [], "x"
    for layer in range(layers):
        weights.append(array(f"w{layer}", (rng.standard_normal((width, width)) * 0.03).astype(np.float32)))
        nodes.append(helper.make_node("MatMul", [current, f"w{layer}"], [f"h{layer}"]))
        current = f"h{layer}"
    nodes.append(helper.make_node("Relu", [current], ["y"]))
    model = finish(nodes, [tensor("x", [1, width])], [tensor("y", [1, width])], weights)
    return save(model, directory, "projections.onnx")


def skip_concat(directory: Path, *, width: int = 4096, between: int = 3) -> Path:
    """A Relu whose output a Concat joins again after ``between`` elementwise layers of a ``width`` row: the
    Concat reads one input written right before it and one written ``between`` layers before."""
    operators = ["Tanh", "Sigmoid", "Neg", "Abs", "Exp"]
    nodes = [helper.make_node("Relu", ["x"], ["kept"])]
    current = "kept"
    for layer in range(between):
        nodes.append(helper.make_node(operators[layer % len(operators)], [current], [f"h{layer}"]))
        current = f"h{layer}"
    nodes.append(helper.make_node("Concat", [current, "kept"], ["y"], axis=1))
    model = finish(nodes, [tensor("x", [1, width])], [tensor("y", [1, 2 * width])])
    return save(model, directory, "skip_concat.onnx")


def quantized_matmul(directory: Path, *, seed: int = 0, name: str = "quantized.onnx") -> Path:
    """A dynamically quantized projection, as quantization tools write one: the row quantized at run time, an
    int8 weight of 64x32 (drawn from ``seed``) and its per-column zero points, an int32 bias added to the
    product, the sum dequantized."""
    rng = np.random.default_rng(seed)
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "scale", "zero"]),
        helper.make_node("MatMulInteger", ["xq", "w", "zero", "w_zero"], ["product"]),
        helper.make_node("Add", ["product", "bias"], ["biased"]),
        helper.make_node("Cast", ["biased"], ["wide"], to=FLOAT),
        helper.make_node("Mul", ["wide", "scale"], ["y"]),
    ]
    weights = [
        array("w", rng.integers(-127, 128, (64, 32)).astype(np.int8)),
        array("w_zero", np.zeros(32, np.int8)),
        array("bias", rng.integers(-1000, 1000, 32).astype(np.int32)),
    ]
    model = finish(nodes, [tensor("x", [4, 64])], [tensor("y", [4, 32])], weights)
    return save(model, directory, name)


def quantized_conv(directory: Path, *, seed: int = 0) -> Path:
    """A quantized convolution (QLinearConv) as static quantization writes one: a uint8 image, an int8 kernel of
    8x4x3x3 and an int32 bias (both drawn from ``seed``), per-channel scales and zero points."""
    rng = np.random.default_rng(seed)
    weights = [
        array("x_scale", np.array(0.02, np.float32)),
        array("x_zero", np.array(128, np.uint8)),
        array("w", rng.integers(-127, 128, (8, 4, 3, 3)).astype(np.int8)),
        array("w_scale", np.full(8, 0.01, np.float32)),
        array("w_zero", np.zeros(8, np.int8)),
        array("y_scale", np.array(0.05, np.float32)),
        array("y_zero", np.array(128, np.uint8)),
        array("bias", rng.integers(-1000, 1000, 8).astype(np.int32)),
    ]
    inputs = ["x", "x_scale", "x_zero", "w", "w_scale", "w_zero", "y_scale", "y_zero", "bias"]
    nodes = [helper.make_node("QLinearConv", inputs, ["y"], pads=[1, 1, 1, 1])]
    model = finish(
        nodes, [tensor("x", [1, 4, 8, 8], TensorProto.UINT8)], [tensor("y", [1, 8, 8, 8], TensorProto.UINT8)], weights
    )
    return save(model, directory, "quantized_conv.onnx")
