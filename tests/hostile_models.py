"""A corpus of broken, hostile and unusual model files, written into a folder at test time.

Users point the plugin at folders of models they did not write. Each :class:`Case` writes one model
file (and any file it refers to) and states what the plugin must make of it: ``load``, refused as a
whole with one error item; ``brick``, loaded but with exactly one brick that fails; or ``runs``,
unusual but valid, benchmarked like any model. The outcome may depend on the cut: onnxruntime
refuses, while optimizing the whole model, what only one brick shows when the model is cut as
written (``--dlbricks-cut=original``). ``cause`` is an ``fnmatch`` pattern of the sentence the
error item shows after ``<file>: `` (or after the brick's name and users). Two Loops never end:
they fail once onnxruntime stops them (after ``runtime.RUN_TIME_LIMIT_S``, which the tests shorten).

Run as a script to write the corpus into a folder and try it by hand::

    python tests/hostile_models.py /tmp/corpus && pytest --dlbricks-granularity=1 /tmp/corpus
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import tiny_models
from onnx import TensorProto, helper
from tiny_models import BOOL, FLOAT, INT64, array, finish, tensor

#: Bigger than any machine's memory: 2**60 float32 elements, 4 EiB.
ABSURD_SHAPE = (1 << 20, 1 << 20, 1 << 20)


@dataclass(frozen=True)
class Case:
    """One file of the corpus and the outcome the plugin must give for it."""

    name: str
    #: Writes ``<folder>/<name>.onnx`` (and whatever it refers to).
    write: Callable[[Path, str], None]
    #: With the default cut, the graph onnxruntime optimized.
    outcome: str
    cause: str = ""
    #: With ``--dlbricks-cut=original``, where it differs.
    original_outcome: str | None = None

    def path(self, folder: Path) -> Path:
        return folder / f"{self.name}.onnx"

    def outcome_of(self, cut: str) -> str:
        return (self.original_outcome or self.outcome) if cut == "original" else self.outcome


def write_corpus(folder: Path) -> list[Case]:
    """Write every case into ``folder`` (created if needed) and return the cases."""
    folder.mkdir(parents=True, exist_ok=True)
    for case in CASES:
        case.write(folder, case.name)
    return list(CASES)


# -- small builders ------------------------------------------------------------------------------


def _model_bytes(model: onnx.ModelProto) -> Callable[[Path, str], None]:
    return _raw(model.SerializeToString())


def _raw(data: bytes) -> Callable[[Path, str], None]:
    def write(folder: Path, name: str) -> None:
        (folder / f"{name}.onnx").write_bytes(data)

    return write


def _relu(
    shape: tuple[int, ...] = (2, 4), dtype: int = FLOAT, *, ir_version: int = tiny_models.IR_VERSION
) -> onnx.ModelProto:
    """Relu on one input: the smallest valid model, for cases that change one thing about it."""
    node = helper.make_node("Relu", ["x"], ["y"])
    return finish([node], [tensor("x", shape, dtype)], [tensor("y", shape, dtype)], ir_version=ir_version)


def _with_opset(domain: str, version: int, *, ir_version: int = tiny_models.IR_VERSION) -> onnx.ModelProto:
    model = _relu(ir_version=ir_version)
    if domain:
        model.opset_import.append(helper.make_opsetid(domain, version))
    else:
        model.opset_import[0].version = version
    return model


def _first_refused(make: Callable[[int], onnx.ModelProto], start: int) -> int:
    """The lowest version from ``start`` up that the installed onnxruntime refuses to load.

    Derived from the runtime rather than written down, so the corpus stays true when onnxruntime
    learns a newer opset or IR version.
    """
    import onnxruntime

    from pytest_dlbricks.core.runtime import new_options

    for version in range(start, start + 64):
        try:
            onnxruntime.InferenceSession(
                make(version).SerializeToString(), new_options(), providers=["CPUExecutionProvider"]
            )
        except Exception:
            return version
    raise AssertionError(f"onnxruntime loads every version from {start} to {start + 63}")


#: The first default-domain opset and IR version that the installed onnxruntime does not load.
RUNTIME_REFUSED_OPSET = _first_refused(lambda v: _with_opset("", v), onnx.defs.onnx_opset_version())
RUNTIME_REFUSED_IR = _first_refused(lambda v: _relu(ir_version=v), tiny_models.IR_VERSION)


def _custom_op(domain: str, *, imported: bool = True, declared: bool = False) -> onnx.ModelProto:
    """Relu, an operator ``Secret`` of ``domain``, Relu; ``declared`` adds the value specs it yields."""
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Secret", ["a"], ["b"], domain=domain),
        helper.make_node("Relu", ["b"], ["y"]),
    ]
    model = finish(nodes, [tensor("x", (2, 4))], [tensor("y", (2, 4))])
    if imported and domain:
        model.opset_import.append(helper.make_opsetid(domain, 1))
    if declared:
        model.graph.value_info.extend([tensor("a", (2, 4)), tensor("b", (2, 4))])
    return model


def _gemm_with_weight(weight: onnx.TensorProto) -> onnx.ModelProto:
    node = helper.make_node("Gemm", ["x", "w"], ["y"])
    return finish([node], [tensor("x", (2, 4))], [tensor("y", (2, 4))], [weight])


def _bad_weight(change: Callable[[onnx.TensorProto], None]) -> onnx.ModelProto:
    weight = array("w", np.ones((4, 4), np.float32))
    change(weight)
    return _gemm_with_weight(weight)


def _set_dims(*dims: int) -> Callable[[onnx.TensorProto], None]:
    def change(weight: onnx.TensorProto) -> None:
        weight.ClearField("dims")
        weight.dims.extend(dims)

    return change


def _set_type(data_type: int) -> Callable[[onnx.TensorProto], None]:
    def change(weight: onnx.TensorProto) -> None:
        weight.data_type = data_type

    return change


def _external(location: str | None = None, **entries: str) -> Callable[[Path, str], None]:
    """:func:`tiny_models.external_weights` with its weights in ``<name>.bin``, then entries rewritten.

    ``location`` (``{folder}`` stands for the corpus folder) replaces every weight's location; other
    entries (``offset``, ``length``) are set as given. A copy of the real weights is written where the
    location points, so a refusal is not explained by a missing file.
    """

    def write(folder: Path, name: str) -> None:
        workdir = folder / f".{name}"
        workdir.mkdir()
        source = tiny_models.external_weights(workdir)
        model = onnx.load(str(source), load_external_data=False)
        weights = (workdir / "weights.bin").read_bytes()
        target = location.format(folder=folder) if location is not None else f"{name}.bin"
        for initializer in model.graph.initializer:
            for entry in initializer.external_data:
                if entry.key == "location":
                    entry.value = target
                elif entry.key in entries:
                    entry.value = entries[entry.key]
        if "\0" not in target:
            destination = folder / target
            destination.parent.mkdir(parents=True, exist_ok=True)
            destination.write_bytes(weights)
        onnx.save(model, str(folder / f"{name}.onnx"))

    return write


def _external_then(change: Callable[[Path], None]) -> Callable[[Path, str], None]:
    """An external-data model whose weight file ``change`` then alters (removes, truncates...)."""

    def write(folder: Path, name: str) -> None:
        _external()(folder, name)
        change(folder / f"{name}.bin")

    return write


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:100])


def _symlink_outside(folder: Path, name: str) -> None:
    """External data through a symbolic link in the model's folder that points outside it."""
    _external(location="{folder}/../outside.bin")(folder, name)
    link = folder / f"{name}-link.bin"
    link.symlink_to(folder.parent / "outside.bin")
    model = onnx.load(str(folder / f"{name}.onnx"), load_external_data=False)
    for initializer in model.graph.initializer:
        for entry in initializer.external_data:
            if entry.key == "location":
                entry.value = link.name
    onnx.save(model, str(folder / f"{name}.onnx"))


def _with_non_utf8(model: onnx.ModelProto, name: str) -> bytes:
    """``model``'s bytes with the value or node name ``name`` made invalid UTF-8 (same length)."""
    data = model.SerializeToString()
    encoded = name.encode()
    assert data.count(encoded) >= 1, name
    return data.replace(encoded, encoded[:-2] + b"\xff\xfe")


def _named_relu() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Relu", ["x"], ["hidden_value"], name="first_node"),
        helper.make_node("Sigmoid", ["hidden_value"], ["y"], name="second_node"),
    ]
    return finish(nodes, [tensor("x", (2, 4))], [tensor("y", (2, 4))])


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _message_field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _nested_too_deep(depth: int = 2000) -> bytes:
    """A graph whose If node holds a graph whose If node holds... ``depth`` levels: a parser bomb.

    Written by hand because protobuf refuses to build it: GraphProto.node (1) -> NodeProto.attribute
    (5) -> AttributeProto.g (6) -> GraphProto, under ModelProto.graph (7).
    """
    graph = b""
    for _ in range(depth):
        attribute = _message_field(1, b"then_branch") + _message_field(6, graph)
        node = _message_field(4, b"If") + _message_field(5, attribute)
        graph = _message_field(1, node)
    return _varint(1 << 3) + _varint(tiny_models.IR_VERSION) + _message_field(7, graph)


def _if_model(then_outputs: int = 1, then_reads: str = "a") -> onnx.ModelProto:
    then_nodes = [helper.make_node("Relu", [then_reads], [f"t{i}"]) for i in range(then_outputs)]
    then_branch = helper.make_graph(then_nodes, "then", [], [tensor(f"t{i}", (2, 4)) for i in range(then_outputs)])
    else_branch = helper.make_graph([helper.make_node("Neg", ["a"], ["e"])], "else", [], [tensor("e", (2, 4))])
    nodes = [
        helper.make_node("Sigmoid", ["x"], ["a"]),
        helper.make_node("If", ["flag"], ["y"], then_branch=then_branch, else_branch=else_branch),
    ]
    return finish(nodes, [tensor("x", (2, 4)), tensor("flag", (), BOOL)], [tensor("y", (2, 4))])


def _loop_model(body_inputs: int = 3, trips: int = 3, *, scan_output: bool = False) -> onnx.ModelProto:
    """A Loop adding 1 to a [2, 4] state ``trips`` times; ``body_inputs`` below 3 breaks its body.

    ``scan_output`` also stacks the state of every trip, an output whose length shape inference
    cannot tell, so that loading runs the model to learn it.
    """
    all_inputs = [tensor("i", (), INT64), tensor("cond", (), BOOL), tensor("state", (2, 4))]
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond"], ["cond_out"]),
            helper.make_node("Add", ["state", "one"], ["state_out"]),
        ],
        "body",
        all_inputs if body_inputs == 3 else all_inputs[1:],
        [tensor("cond_out", (), BOOL), tensor("state_out", (2, 4))],
        initializer=[array("one", np.ones((2, 4), np.float32))],
    )
    outputs = [tensor("y", (2, 4))]
    if scan_output:
        body.node.append(helper.make_node("Identity", ["state_out"], ["stacked"]))
        body.output.append(tensor("stacked", (2, 4)))
        outputs.append(tensor("trips_stacked", ("trips_done", 2, 4)))
    initializers = [array("trips", np.array(trips, np.int64)), array("go", np.array(True))]
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Loop", ["trips", "go", "r"], [o.name for o in outputs], body=body),
    ]
    return finish(nodes, [tensor("x", (2, 4))], outputs, initializers)


def never_ending_loop(*, stacking: bool) -> onnx.ModelProto:
    """A Loop of 2**62 trips; ``stacking`` also keeps every trip's state, growing memory as it runs."""
    return _loop_model(trips=1 << 62, scan_output=stacking)


def _scan_model(body_outputs: int = 2) -> onnx.ModelProto:
    """A Scan summing the rows of ``x[3, 4]``; ``body_outputs=1`` breaks its body (the Scan has two)."""
    body = helper.make_graph(
        [
            helper.make_node("Add", ["sum_in", "row"], ["sum_out"]),
            helper.make_node("Identity", ["sum_out"], ["scan_out"]),
        ],
        "body",
        [tensor("sum_in", (4,)), tensor("row", (4,))],
        [tensor("sum_out", (4,)), tensor("scan_out", (4,))][:body_outputs],
    )
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Scan", ["zeros", "r"], ["total", "rows"], body=body, num_scan_inputs=1),
    ]
    zeros = array("zeros", np.zeros(4, np.float32))
    return finish(nodes, [tensor("x", (3, 4))], [tensor("total", (4,)), tensor("rows", (3, 4))], [zeros])


def _local_function() -> onnx.ModelProto:
    """A model-local function ``custom.Swish`` (x * Sigmoid(x)): a custom domain onnxruntime can run."""
    function = helper.make_function(
        "custom",
        "Swish",
        ["v"],
        ["w"],
        [helper.make_node("Sigmoid", ["v"], ["s"]), helper.make_node("Mul", ["v", "s"], ["w"])],
        [helper.make_opsetid("", tiny_models.OPSET)],
    )
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Swish", ["r"], ["y"], domain="custom")]
    model = finish(nodes, [tensor("x", (2, 4))], [tensor("y", (2, 4))])
    model.opset_import.append(helper.make_opsetid("custom", 1))
    model.functions.append(function)
    return model


def _cycle() -> onnx.ModelProto:
    nodes = [helper.make_node("Add", ["x", "b"], ["a"]), helper.make_node("Relu", ["a"], ["b"])]
    return finish(nodes, [tensor("x", (2,))], [tensor("b", (2,))])


def subgraph_cycle() -> onnx.ModelProto:
    """An If whose then-branch computes ``p`` from ``q`` and ``q`` from ``p``."""
    then_nodes = [helper.make_node("Relu", ["q"], ["p"]), helper.make_node("Neg", ["p"], ["q"])]
    then_branch = helper.make_graph(then_nodes, "then", [], [tensor("p", (2, 4))])
    else_branch = helper.make_graph([helper.make_node("Neg", ["a"], ["e"])], "else", [], [tensor("e", (2, 4))])
    nodes = [
        helper.make_node("Sigmoid", ["x"], ["a"]),
        helper.make_node("If", ["flag"], ["y"], then_branch=then_branch, else_branch=else_branch),
    ]
    return finish(nodes, [tensor("x", (2, 4)), tensor("flag", (), BOOL)], [tensor("y", (2, 4))])


def _dangling() -> onnx.ModelProto:
    return finish([helper.make_node("Add", ["x", "nowhere"], ["y"])], [tensor("x", (2,))], [tensor("y", (2,))])


def _duplicate_outputs() -> onnx.ModelProto:
    nodes = [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["x"], ["y"])]
    return finish(nodes, [tensor("x", (2,))], [tensor("y", (2,))])


def _duplicate_inputs() -> onnx.ModelProto:
    node = helper.make_node("Add", ["x", "x"], ["y"])
    return finish([node], [tensor("x", (2,)), tensor("x", (2,))], [tensor("y", (2,))])


def _expand_to(shape: tuple[int, ...]) -> onnx.ModelProto:
    """Relu, then Expand to a constant ``shape``: shape inference knows the output size before any run."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Expand", ["r", "shape"], ["y"])]
    return finish(nodes, [tensor("x", (1,))], [tensor("y", shape)], [array("shape", np.array(shape, np.int64))])


def _reshape_short_shape(claimed: int = 3) -> onnx.ModelProto:
    """Reshape by an int64 shape weight that declares ``claimed`` elements but stores 2.

    It is read, so it must be whole; claiming 2**31 elements once made onnx's shape inference run
    for minutes on values that do not exist.
    """
    shape = array("shape", np.array([4, 2], np.int64))
    shape.dims[:] = [claimed]
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Reshape", ["r", "shape"], ["y"])]
    return finish(nodes, [tensor("x", (2, 4))], [tensor("y", (4, 2))], [shape])


def _zero_size_weight() -> onnx.ModelProto:
    """Concat of the input with an empty [0, 4] weight: valid, does the work of a copy."""
    nodes = [helper.make_node("Concat", ["x", "empty"], ["c"], axis=0), helper.make_node("Relu", ["c"], ["y"])]
    return finish(nodes, [tensor("x", (2, 4))], [tensor("y", (2, 4))], [array("empty", np.zeros((0, 4), np.float32))])


def _contrib_op() -> onnx.ModelProto:
    """onnxruntime's own ``com.microsoft.Gelu``: a custom domain that onnxruntime implements."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Gelu", ["r"], ["y"], domain="com.microsoft")]
    model = finish(nodes, [tensor("x", (2, 4))], [tensor("y", (2, 4))])
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return model


def _string_cast() -> onnx.ModelProto:
    """Relu, Cast to string, Cast back: a string tensor between two layers."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Cast", ["r"], ["text"], to=TensorProto.STRING),
        helper.make_node("Cast", ["text"], ["y"], to=FLOAT),
    ]
    return finish(nodes, [tensor("x", (2, 4))], [tensor("y", (2, 4))])


def _relu_text() -> bytes:
    return onnx.printer.to_text(_relu()).encode()


def _over_protobuf_limit(folder: Path, name: str) -> None:
    """A file one byte over the 2 GiB protobuf can parse; sparse, so it costs no disk space."""
    with (folder / f"{name}.onnx").open("wb") as stream:
        stream.truncate((2 << 30) + 1)


def _float_claim(gib: int) -> onnx.ModelProto:
    """Add of a float weight whose shape claims ``gib`` GiB while its raw data holds 16 bytes."""
    weight = array("w", np.ones(4, np.float32))
    weight.dims[:] = [gib << 28]
    node = helper.make_node("Add", ["x", "w"], ["y"])
    return finish([node], [tensor("x", (gib << 28,))], [tensor("y", (gib << 28,))], [weight])


def _link(target: Callable[[Path], Path | str]) -> Callable[[Path, str], None]:
    """A symbolic link named like a model, to what ``target`` makes of the corpus folder."""

    def write(folder: Path, name: str) -> None:
        (folder / f"{name}.onnx").symlink_to(target(folder))

    return write


def _model_outside(folder: Path) -> Path:
    """A valid model in a folder beside the corpus, outside the tree pytest was pointed at."""
    outside = folder.parent / f"{folder.name}-outside"
    outside.mkdir(exist_ok=True)
    path = outside / "relu.onnx"
    path.write_bytes(_relu().SerializeToString())
    return path


def _sparse_weights(folder: Path, name: str) -> None:
    tiny_models.sparse_weights(folder).rename(folder / f"{name}.onnx")


def _unknown_element_type_with_sample(folder: Path, name: str) -> None:
    """An input of element type 99 (none onnx knows), with a sample input for it beside the model."""
    model = _relu()
    model.graph.input[0].type.tensor_type.elem_type = 99
    (folder / f"{name}.onnx").write_bytes(model.SerializeToString())
    np.savez(folder / f"{name}.npz", x=np.zeros((2, 4), np.float32))


def _model_without_graph() -> onnx.ModelProto:
    model = onnx.ModelProto(ir_version=tiny_models.IR_VERSION)
    model.opset_import.append(helper.make_opsetid("", tiny_models.OPSET))
    return model


def _unproduced_output() -> onnx.ModelProto:
    return finish([helper.make_node("Relu", ["x"], ["y"])], [tensor("x", (2,))], [tensor("z", (2,))])


CASES: tuple[Case, ...] = (
    # Not a model at all.
    Case("empty", _raw(b""), "load", "the file is empty, not an ONNX model"),
    Case(
        "random_bytes",
        _raw(np.random.default_rng(7).integers(0, 256, 4096, dtype=np.uint8).tobytes()),
        "load",
        "not an ONNX model*",
    ),
    Case("truncated", _raw(tiny_models.chain_model().SerializeToString()[:1500]), "load", "not an ONNX model*"),
    Case("tensor_not_model", _raw(array("t", np.arange(12)).SerializeToString()), "load", "not an ONNX model*"),
    Case("text_not_binary", _raw(_relu_text()), "load", "not an ONNX model*"),
    Case("model_without_graph", _model_bytes(_model_without_graph()), "load", "not an ONNX model*no graph*"),
    Case("nested_too_deep", _raw(_nested_too_deep()), "load", "not an ONNX model*"),
    Case("over_protobuf_limit", _over_protobuf_limit, "load", "the file holds 2.0 GiB*protobuf*; refused, the file*"),
    # Links: followed to regular files, as pytest follows them; never into the system's special files.
    Case("link_outside_the_tree", _link(_model_outside), "runs"),
    # A type no check of onnx's own catches.
    Case(
        "unknown_element_type_with_sample",
        _unknown_element_type_with_sample,
        "load",
        "input 'x' has no element type onnx knows (99)",
    ),
    Case("link_to_proc", _link(lambda folder: "/proc/self/environ"), "load", "*a file of the system's /proc*not read"),
    # Graphs that cannot execute.
    Case("cycle", _model_bytes(_cycle()), "load", "the graph has a cycle*"),
    Case("dangling_input", _model_bytes(_dangling()), "load", "*reads 'nowhere', which nothing produces"),
    Case("cycle_in_subgraph", _model_bytes(subgraph_cycle()), "load", "the then_branch of node 'If' has a cycle*"),
    Case("duplicate_outputs", _model_bytes(_duplicate_outputs()), "load", "value 'y' is produced by more than one*"),
    Case("duplicate_inputs", _model_bytes(_duplicate_inputs()), "load", "onnxruntime cannot load the model: *x*"),
    Case("unproduced_output", _model_bytes(_unproduced_output()), "load", "onnxruntime cannot load the model: *z*"),
    # Operators and versions.
    Case("unknown_operator", _model_bytes(_custom_op("")), "load", "*Secret*"),
    Case("custom_domain_not_imported", _model_bytes(_custom_op("com.vendor", imported=False)), "load", "*com.vendor*"),
    Case("custom_domain_unknown", _model_bytes(_custom_op("com.vendor")), "load", "*Secret*"),
    Case(
        "custom_domain_declared_shapes",
        _model_bytes(_custom_op("com.vendor", declared=True)),
        "load",
        "*Secret*",
        original_outcome="brick",
    ),
    Case(
        "opset_newer_than_runtime",
        _model_bytes(_with_opset("", RUNTIME_REFUSED_OPSET)),
        "load",
        f"*opset*{RUNTIME_REFUSED_OPSET}*",
    ),
    Case("opset_far_future", _model_bytes(_with_opset("", 99)), "load", "*opset*99*"),
    Case("ml_opset_far_future", _model_bytes(_with_opset("ai.onnx.ml", 99)), "load", "*ai.onnx.ml*99*"),
    Case(
        "ir_newer_than_runtime",
        _model_bytes(_relu(ir_version=RUNTIME_REFUSED_IR)),
        "load",
        f"*IR version {RUNTIME_REFUSED_IR}*",
    ),
    Case("ir_far_future", _model_bytes(_relu(ir_version=99)), "load", "*IR version*99*"),
    # Types and sizes.
    Case("string_input", _model_bytes(_relu(dtype=TensorProto.STRING)), "load", "*string*"),
    Case("complex_input", _model_bytes(_relu(dtype=TensorProto.COMPLEX64)), "load", "*complex64*"),
    Case(
        "complex_weight",
        _model_bytes(_gemm_with_weight(array("w", np.ones((4, 4), np.complex64)))),
        "load",
        "*complex64*",
        original_outcome="brick",
    ),
    Case("unknown_weight_type", _model_bytes(_bad_weight(_set_type(99))), "load", "*'w'*type*"),
    Case("string_between_layers", _model_bytes(_string_cast()), "runs"),
    Case("absurd_input_shape", _model_bytes(_relu(shape=ABSURD_SHAPE)), "load", "*'x'*4.0 EiB*memory*"),
    Case(
        "absurd_weight_shape",
        _model_bytes(_bad_weight(_set_dims(*ABSURD_SHAPE))),
        "load",
        "*'w' declares*stores at most*",
    ),
    Case("absurd_computed_shape", _model_bytes(_expand_to(ABSURD_SHAPE)), "load", "*'y'*4.0 EiB*"),
    Case(
        "weight_shape_without_data",
        _model_bytes(_reshape_short_shape(claimed=1 << 31)),
        "load",
        "weight 'shape' declares 2147483648 values (shape *) but the file stores 16 bytes of them",
    ),
    Case("negative_weight_dim", _model_bytes(_bad_weight(_set_dims(4, -4))), "load", "*'w'*negative*"),
    Case("shape_data_short", _model_bytes(_reshape_short_shape()), "load", "*'shape'*"),
    Case("zero_size_weight", _model_bytes(_zero_size_weight()), "runs"),
    Case("sparse_initializer", _sparse_weights, "runs"),
    Case(
        "float_weight_claims_2_gib",
        _model_bytes(_float_claim(2)),
        "load",
        "weight 'w' declares * stores at most ?? bytes of them",
    ),
    # External data.
    Case("external_missing", _external_then(Path.unlink), "load", "external data file*is missing"),
    Case("external_truncated", _external_then(_truncate), "load", "external data file*holds 100 bytes*"),
    Case("external_escapes", _external(location="../escaped.bin"), "load", "*outside the model's folder; refused*"),
    Case("external_absolute", _external(location="{folder}/abs.bin"), "load", "*absolute path*; refused*"),
    Case("external_symlink_out", _symlink_outside, "load", "*outside the model's folder; refused*"),
    Case(
        "external_bad_offset", _external(offset="a lot"), "load", "*offset or length that is not a byte count*'a lot'"
    ),
    Case("external_null_byte", _external(location="w\0.bin"), "load", "*no usable file name"),
    # Names.
    Case("non_utf8_value_name", _raw(_with_non_utf8(_named_relu(), "hidden_value")), "load", "*UTF-8*"),
    Case("non_utf8_node_name", _raw(_with_non_utf8(_named_relu(), "first_node")), "load", "*UTF-8*"),
    # Subgraphs.
    Case("if_valid", _model_bytes(_if_model()), "runs"),
    Case("loop_valid", _model_bytes(_loop_model()), "runs"),
    Case("scan_valid", _model_bytes(_scan_model()), "runs"),
    Case("local_function", _model_bytes(_local_function()), "runs"),
    Case("contrib_operator", _model_bytes(_contrib_op()), "runs"),
    # The values a Loop reads steer its work: the run that learns them meets the endless Loop first.
    Case(
        "loop_never_ends",
        _model_bytes(never_ending_loop(stacking=False)),
        "load",
        "*cannot run the model to learn its shapes*did not finish*stopped it",
    ),
    Case(
        "loop_never_ends_while_loading",
        _model_bytes(never_ending_loop(stacking=True)),
        "load",
        "*cannot run the model to learn its shapes*did not finish*stopped it",
    ),
    Case("if_branch_reads_nothing", _model_bytes(_if_model(then_reads="ghost")), "load", "*'ghost'*"),
    Case(
        "if_branches_disagree",
        _model_bytes(_if_model(then_outputs=2)),
        "load",
        "*different number of outputs*",
    ),
    Case(
        "loop_body_wrong_inputs",
        _model_bytes(_loop_model(body_inputs=2)),
        "load",
        "*Loop*subgraph inputs*",
    ),
    Case(
        "scan_body_missing_output",
        _model_bytes(_scan_model(body_outputs=1)),
        "load",
        "*Scan*",
        original_outcome="brick",
    ),
)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} FOLDER")
    for written in write_corpus(Path(sys.argv[1])):
        print(f"{written.outcome:6} {written.name}")
