"""Refuse what the plugin could not use safely, before any memory or time is spent on it.

Models come from people the user may not trust. Loading checks, in this order: the file is a regular
file no larger than protobuf can parse, and no link into the system's pseudo-file folders (checked
before a byte of it is read); names and other text are UTF-8 (ONNX requires it; protobuf hands
invalid text over as bytes); weights have an ONNX element type and no negative dimension; the
installed onnxruntime accepts the IR version and opsets; model inputs have a type that can be given
synthetic values; and no tensor the model declares or shape inference derives needs more than
:func:`memory_limit` bytes.
"""

from __future__ import annotations

import math
import stat
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import onnx
from onnx import external_data_helper

from ..core.errors import ModelError
from ..core.graph import TensorSpec, format_bytes, is_tensor_type, memory_limit
from ..core.runtime import runtime_refusal, runtime_version
from ..core.synthetic import can_synthesise

#: Most values one stored unit (a raw byte, or an entry of a typed field) may hold: 4-bit types pack
#: two per byte, 2-bit ones four; anything sparser is a shape the data does not back.
_MAX_VALUES_PER_UNIT = 8
_VALUE_FIELDS = ("float_data", "int32_data", "string_data", "int64_data", "double_data", "uint64_data")
#: Largest message protobuf parses (2 GiB less a byte): a larger model file cannot be an ONNX model.
MAX_MODEL_FILE_BYTES = (1 << 31) - 1
#: Folders of the system's pseudo files: what they hold is no model, and may be secret or endless.
SYSTEM_FOLDERS = (Path("/proc"), Path("/sys"), Path("/dev"))
_FILE_KINDS = {
    stat.S_IFIFO: "FIFO",
    stat.S_IFCHR: "character device",
    stat.S_IFBLK: "block device",
    stat.S_IFSOCK: "socket",
    stat.S_IFDIR: "folder",
}


def check_model_file(path: Path) -> int:
    """The size of the model file at ``path``, which may be read; refuses, before reading a byte, what
    is no regular file (a FIFO would wait for a writer forever, a device never ends), a file of the
    system's pseudo-file folders, and a file larger than protobuf parses.

    Links are followed, as pytest follows them when it collects: a link to a model elsewhere is that
    model. The file is named as pytest shows it; the message says where a link leads.
    """
    try:
        status = path.stat()
        target = path.resolve()
    except (OSError, RuntimeError) as error:  # RuntimeError: a loop of links
        raise ModelError(path, f"cannot read the file: {getattr(error, 'strerror', None) or error}") from None
    for folder in SYSTEM_FOLDERS:
        if target.is_relative_to(folder):
            raise ModelError(path, f"the file links to {target}, a file of the system's {folder}; refused, not read")
    if not stat.S_ISREG(status.st_mode):
        kind = _FILE_KINDS.get(stat.S_IFMT(status.st_mode), "special file")
        raise ModelError(path, f"the file is not a regular file but a {kind}; refused, not read")
    if status.st_size > MAX_MODEL_FILE_BYTES:
        raise ModelError(
            path,
            f"the file holds {format_bytes(status.st_size)}, more than the 2 GiB protobuf can parse; refused, the"
            " file was not read (models this large keep their weights in external data files)",
        )
    return status.st_size


def check_text(path: Path, model: onnx.ModelProto) -> None:
    """Every name the plugin reads is text; protobuf returns invalid UTF-8 as bytes instead."""
    for where, text in _texts(model):
        if isinstance(text, bytes):
            raise ModelError(path, f"{where} {text!r} is not valid UTF-8 text, which ONNX requires")


def _texts(model: onnx.ModelProto) -> Iterator[tuple[str, str | bytes]]:
    for opset in model.opset_import:
        yield "an opset domain", opset.domain
    for function in model.functions:
        yield "a function name", function.name
        yield "a function domain", function.domain
        yield from _node_texts(function.node)
    yield from _graph_texts(model.graph)


def _graph_texts(graph: onnx.GraphProto) -> Iterator[tuple[str, str | bytes]]:
    for value in [*graph.input, *graph.output, *graph.value_info]:
        yield "a value name", value.name
        for dim in value.type.tensor_type.shape.dim:
            yield "a dimension name", dim.dim_param
    for tensor in graph.initializer:
        yield "a weight name", tensor.name
        for entry in tensor.external_data:
            yield "an external data key", entry.key
            yield "an external data value", entry.value
    yield from _node_texts(graph.node)


def _node_texts(nodes: Iterable[onnx.NodeProto]) -> Iterator[tuple[str, str | bytes]]:
    for node in nodes:
        yield "a node name", node.name
        yield "an operator name", node.op_type
        yield "an operator domain", node.domain
        for name in [*node.input, *node.output]:
            yield "a value name", name
        for attribute in node.attribute:
            yield "an attribute name", attribute.name
            if attribute.type == onnx.AttributeProto.GRAPH:
                yield from _graph_texts(attribute.g)
            for body in attribute.graphs:
                yield from _graph_texts(body)


def check_weights(path: Path, weights: Iterable[onnx.TensorProto]) -> None:
    """Each weight has an ONNX element type, no negative dimension, and stores about as many values
    as its shape says (shape inference would otherwise work, for minutes, on values that do not exist)."""
    for tensor in weights:
        if not is_tensor_type(tensor.data_type):
            raise ModelError(
                path, f"weight {tensor.name!r} has element type {tensor.data_type}, which is not an ONNX tensor type"
            )
        if any(dim < 0 for dim in tensor.dims):
            raise ModelError(path, f"weight {tensor.name!r} has a negative dimension in its shape {list(tensor.dims)}")
        stored, described = _stored_units(tensor)
        if stored is not None and stored * _MAX_VALUES_PER_UNIT < math.prod(tensor.dims):
            raise ModelError(
                path,
                f"weight {tensor.name!r} declares {math.prod(tensor.dims)} values (shape {list(tensor.dims)}) but"
                f" the file stores {described} of them",
            )


def _stored_units(tensor: onnx.TensorProto) -> tuple[int | None, str]:
    """How many values (or raw bytes) a weight stores in the file, and that in words; None where that
    means reading another file (external data, checked against its file's size).

    Floats' raw bytes are counted from the message's size, which includes a few bytes of its other
    fields: reading them would copy a weight the plugin never reads otherwise.
    """
    if external_data_helper.uses_external_data(tensor):
        return None, ""
    if tensor.HasField("raw_data"):
        floats = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).kind == "f"
        size = tensor.ByteSize() if floats else len(tensor.raw_data)
        return size, f"{'at most ' if floats else ''}{size} bytes"
    count = sum(len(getattr(tensor, field)) for field in _VALUE_FIELDS)
    return count, f"{count} values"


def check_runtime_accepts(path: Path, ir_version: int, opsets: Mapping[str, int]) -> None:
    """The installed onnxruntime loads models of this IR version and these opsets (learned from a probe)."""
    cause = runtime_refusal(ir_version, tuple(sorted(opsets.items())))
    if cause is not None:
        versions = ", ".join(f"{domain or 'ai.onnx'} {version}" for domain, version in sorted(opsets.items()))
        raise ModelError(
            path,
            f"onnxruntime {runtime_version()} does not support this model's IR version {ir_version}"
            f" or opsets ({versions}): {cause}",
        )


#: Columns onnxruntime's float matrix product pads a constant right-hand side to when it packs it, as
#: the session is made (measured on onnxruntime 1.32, session peak over the weight's size: [4M, 1]
#: 17.6x, [4M, 4] 5.2x, [1M, 16] 2.2x, [1M, 17] 3.0x).
PACK_COLUMNS = 16
#: Operators whose outputs do not follow from their inputs: never folded into constants.
_UNFOLDED = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial"})


def check_packed_weights(
    path: Path, nodes: Iterable[onnx.NodeProto], specs: Mapping[str, TensorSpec], weights: Iterable[str]
) -> None:
    """No float MatMul's constant right-hand side needs more than :func:`memory_limit` bytes once onnxruntime
    packs it, padding its columns to :data:`PACK_COLUMNS`: a weight of one column takes 16 times its size
    while the session is made, which no run's watch can stop (a 129-byte model, a ConstantOfShape of
    [64M, 1] into a MatMul, took 5 GB). Constants are the weights and what nodes compute from them alone
    (``nodes`` in order), which onnxruntime folds."""
    constants = set(weights)
    limit = memory_limit()
    for node in nodes:
        weight = node.input[1] if node.op_type == "MatMul" and node.domain in ("", "ai.onnx") else None
        spec = specs.get(weight) if weight in constants else None
        if spec is not None and (packed := _packed_bytes(spec)) > limit:
            raise ModelError(
                path,
                f"MatMul weight {weight!r} ({spec.describe()}) would need {format_bytes(packed)} once onnxruntime"
                f" packs it (its columns padded to {PACK_COLUMNS}), more than the {format_bytes(limit)} memory"
                " limit (half of this machine's memory); refused before allocating it",
            )
        if _folds(node, constants):
            constants.update(output for output in node.output if output)


def _packed_bytes(spec: TensorSpec) -> int:
    """Bytes a float matrix takes packed as a matrix product's right-hand side; 0 for other tensors."""
    if spec.dtype != onnx.TensorProto.FLOAT or len(spec.shape) != 2:
        return 0
    rows, columns = spec.shape
    return rows * -(-columns // PACK_COLUMNS) * PACK_COLUMNS * 4


def _folds(node: onnx.NodeProto, constants: set[str]) -> bool:
    """Whether onnxruntime can fold ``node`` into a constant: all its inputs are, and its output follows
    from them (no random values, no subgraph)."""
    if node.op_type in _UNFOLDED or any(a.type in (a.GRAPH, a.GRAPHS) for a in node.attribute):
        return False
    return all(not name or name in constants for name in node.input)


def check_values(
    path: Path,
    specs: Mapping[str, TensorSpec],
    inputs: Iterable[str],
    weights: Iterable[str],
    given: Iterable[str] = (),
) -> None:
    """Inputs not ``given`` sample values can be given synthetic ones, and no tensor needs more than
    :func:`memory_limit` bytes."""
    inputs = set(inputs)
    weights = set(weights)
    for name in inputs - set(given):
        spec = specs.get(name)
        if spec is not None and not can_synthesise(spec.dtype):
            raise ModelError(
                path,
                f"input {name!r} is a tensor of {spec.describe()}; dlbricks can only make synthetic numbers and"
                " booleans: give it sample inputs (a test_data_set_0 folder, a .npz beside the model, or the"
                " pytest_dlbricks_model_inputs hook)",
            )
    limit = memory_limit()
    for name, spec in specs.items():
        if spec.nbytes <= limit:
            continue
        role = "input" if name in inputs else "weight" if name in weights else "value"
        raise ModelError(
            path,
            f"{role} {name!r} ({spec.describe()}) would need {format_bytes(spec.nbytes)}, more than the"
            f" {format_bytes(limit)} memory limit (half of this machine's memory); refused before allocating it",
        )
