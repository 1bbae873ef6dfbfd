"""The brick suite: every distinct brick as a standalone ONNX model, and a manifest that lists them.

A suite is meant to leave the owner's hands, so a brick file holds only what the brick's work needs:
its operators and attributes, canonical value names (``input_0``, ``weight_0``, ``value_0``),
synthetic weights, and the real values of the few tensors that steer computation (integer tensors
such as shapes and indices, float scalars such as epsilons, scales, conditions), each listed in the
manifest with its type and shape so the owner sees what leaves. Activations kept because an
operator's work depends on their data (a NonZero's input, say: with sample inputs, the user's real
data) are withheld unless the export asks for them; the manifest names them. No node, graph or value name of the
model, no documentation string, no metadata, no producer of its own, and only the opsets the brick
uses. Those steering values that are activations inside the model are stored as initializers that
are also graph inputs (ONNX's default values), so a brick file runs as it is in any runtime; so are
the weights the model lists as inputs, which the manifest names (``weights_as_inputs``).

The manifest (``manifest.json``) names each file with its signature, operators, opsets and the
types and shapes of its inputs, weights and outputs. When pytest-dlbricks collects a folder holding
a manifest, the files the manifest lists are taken as bricks, one item each, never cut again: a
suite exported at any granularity times exactly its bricks.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import onnx
from onnx import numpy_helper

from .. import __version__
from ..core.errors import ModelError
from ..core.graph import TensorSpec
from ..cut.bricks import BrickSpec, brick_signature
from ..cut.screening import check_model_file
from ..estimating.analysis import BrickWork, LayerWork
from ..storage.atomic_files import write_bytes, write_json
from ..timing.synthesis import build_brick_model

MANIFEST = "manifest.json"
#: What a manifest says it is, so that another tool's manifest.json is never mistaken for one.
KIND = "pytest-dlbricks brick suite"
SUITE_VERSION = 1
#: Hex digits of the signature in a brick file's name: enough to keep thousands of bricks apart.
FILE_SIGNATURE_DIGITS = 16


class SuiteError(Exception):
    """A suite folder or brick file cannot be used; the message says why."""


def brick_file_name(brick: BrickSpec) -> str:
    """``Conv+Relu-3f2a91c0d1e2f3a4.onnx``: the brick's label with a longer part of its signature; an
    operator name that is no plain word (a custom domain may name its operators anything) is not let
    out of the folder."""
    ops = re.sub(r"[^A-Za-z0-9+_.-]", "_", brick.label.rsplit("-", 1)[0]).lstrip(".")
    return f"{ops}-{brick.signature[:FILE_SIGNATURE_DIGITS]}.onnx"


def is_plain_file_name(name: object) -> bool:
    """Whether ``name`` names a file inside a folder: no path separator, no ``..``, not absolute."""
    return (
        isinstance(name, str)
        and name not in ("", ".", "..")
        and not any(character in name for character in "/\\\0")
        and Path(name).name == name
    )


def shipped_values(brick: BrickSpec, activations: bool) -> list[str]:
    """Names of the kept values a suite file holds: all steering values, and activations if asked."""
    return sorted(name for name in brick.values if activations or name not in brick.activations)


def suite_model(brick: BrickSpec, activations: bool = False) -> onnx.ModelProto:
    """The standalone model of ``brick`` as a suite ships it (see the module's description)."""
    shipped = shipped_values(brick, activations)
    brick = dataclasses.replace(brick, values={name: brick.values[name] for name in shipped})
    model = build_brick_model(brick)
    used = _domains(model.graph) | {function.domain for function in model.functions}
    for function in model.functions:
        used |= {node.domain for node in function.node}
    opsets = [opset for opset in model.opset_import if opset.domain in used or not opset.domain]
    model.ClearField("opset_import")
    model.opset_import.extend(opsets)
    inputs = {name for name, _ in brick.inputs}
    model.graph.initializer.extend(
        numpy_helper.from_array(value, name) for name, value in sorted(brick.values.items()) if name in inputs
    )
    return model


def _domains(graph: onnx.GraphProto) -> set[str]:
    """Operator domains used by the nodes of ``graph`` and of the subgraphs inside them."""
    found = set()
    for node in graph.node:
        found.add(node.domain)
        for attribute in node.attribute:
            for body in [attribute.g] if attribute.type == onnx.AttributeProto.GRAPH else attribute.graphs:
                found |= _domains(body)
    return found


def manifest_entry(
    brick: BrickSpec,
    file_name: str,
    model: onnx.ModelProto,
    activations: bool = False,
    reads: tuple[float | None, int] = (None, 0),
    input_distances: Sequence[int] = (),
    work: BrickWork | None = None,
) -> dict[str, object]:
    """What the manifest says of one brick, written to ``file_name`` as ``model``: ``real_values`` are the
    kept values the file carries, described in ``kept_values``; ``withheld_values``, the activations it does not;
    ``flops`` and ``rest_of_model_bytes`` (``reads``), what decides whether and how far its weights are pushed out
    of the caches before its calls wherever it is timed, and ``input_distances_bytes``, how far its inputs are
    (see :mod:`.caches`); ``layers``, each layer's operator, FLOPs and bytes (``work``), from which a run of the
    suite reports the brick's FLOPs and its time by operator type as the run that cut it does."""
    shipped = shipped_values(brick, activations)
    specs = dict((*brick.inputs, *brick.weights))
    flops, rest = reads
    return {
        "flops": flops,
        "rest_of_model_bytes": rest,
        "input_distances_bytes": list(input_distances),
        "layers": None if work is None else [[layer.op_type, layer.flops, layer.bytes] for layer in work.layers],
        "file": file_name,
        "signature": brick.signature,
        "ops": list(brick.ops),
        "opsets": {opset.domain or "ai.onnx": opset.version for opset in model.opset_import},
        "inputs": [_tensor(name, spec) for name, spec in brick.inputs],
        "weights": [_tensor(name, spec) for name, spec in brick.weights],
        "outputs": [_tensor(name, spec) for name, spec in brick.outputs]
        + [
            {"name": name, "type": onnx.helper.printable_type(onnx.TypeProto.FromString(kind))}
            for name, kind in brick.non_tensor_outputs
        ],
        "real_values": shipped,
        "kept_values": [
            {**_tensor(name, specs[name]), "kind": "activation" if name in brick.activations else "steering"}
            for name in shipped
        ],
        "activations": sorted(brick.activations),
        "withheld_values": sorted(set(brick.values) - set(shipped)),
        "weights_as_inputs": sorted(brick.weights_as_inputs),
    }


def _tensor(name: str, spec: TensorSpec) -> dict[str, object]:
    return {"name": name, "dtype": onnx.TensorProto.DataType.Name(spec.dtype).lower(), "shape": list(spec.shape)}


def export_suite(
    folder: Path,
    bricks: Iterable[BrickSpec],
    settings: Mapping[str, object],
    *,
    activations: bool = False,
    reads: Mapping[str, tuple[float | None, int]] | None = None,
    input_distances: Mapping[str, Sequence[int]] | None = None,
    work: Mapping[str, BrickWork] | None = None,
) -> int:
    """Write the suite of ``bricks`` to ``folder``; returns how many bricks it holds. ``activations``
    writes the kept activations too (see the module's description); ``reads`` gives, by signature, a brick's
    FLOPs and what the rest of the largest model using it reads in a call, ``input_distances`` how far its
    inputs were written before it, and ``work`` its layers' work (see :func:`manifest_entry`).

    Brick files come first and the manifest last (atomically), so the manifest only ever lists
    files that are complete. Files a previous export listed and this one does not are removed; a
    previous manifest naming a file outside the folder is a :class:`SuiteError`, raised before
    anything is written or removed. Every file is written by renaming a new file over the old one,
    so a link in the folder is replaced, never written through.
    """
    folder.mkdir(parents=True, exist_ok=True)
    previous = read_manifest(folder) or {}
    entries = []
    for brick in bricks:
        name = brick_file_name(brick)
        model = suite_model(brick, activations)
        write_bytes(folder / name, model.SerializeToString())
        entries.append(
            manifest_entry(
                brick,
                name,
                model,
                activations,
                (reads or {}).get(brick.signature, (None, 0)),
                (input_distances or {}).get(brick.signature, ()),
                (work or {}).get(brick.signature),
            )
        )
    manifest = {
        "kind": KIND,
        "version": SUITE_VERSION,
        "generator": f"pytest-dlbricks {__version__}",
        "cut": settings.get("cut"),
        "settings": {key: settings.get(key) for key in ("optimization", "intra_op_threads", "onnxruntime")},
        "bricks": entries,
    }
    write_json(folder / MANIFEST, manifest)
    for stale in set(previous) - {str(entry["file"]) for entry in entries} - {MANIFEST}:
        if (folder / stale).is_file():  # a damaged manifest may name a folder
            (folder / stale).unlink()
    return len(entries)


def check_export_folder(folder: Path) -> str | None:
    """Why ``folder`` must not receive a suite (it holds other things), or None."""
    if not folder.exists() or (folder / MANIFEST).is_file():
        return None
    if not folder.is_dir():
        return f"{folder} exists and is not a folder"
    if any(folder.iterdir()):
        return f"{folder} is not empty and holds no brick suite; export into a new or empty folder"
    return None


def read_manifest(folder: Path) -> dict[str, dict[str, Any]] | None:
    """The manifest's entries by file name, or None when ``folder`` holds no suite manifest."""
    path = folder / MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as error:
        raise SuiteError(f"{path} cannot be read as JSON: {error}") from error
    if not isinstance(manifest, dict) or manifest.get("kind") != KIND:
        return None
    if manifest.get("version") != SUITE_VERSION:
        raise SuiteError(
            f"{path} is version {manifest.get('version')} of the suite format; this pytest-dlbricks reads"
            f" version {SUITE_VERSION}"
        )
    entries = manifest.get("bricks", [])
    if not isinstance(entries, list) or not all(isinstance(entry, dict) for entry in entries):
        raise SuiteError(f"{path} does not list its bricks as a suite manifest does")
    for entry in entries:
        if not is_plain_file_name(entry.get("file")):
            raise SuiteError(
                f"{path} names a file outside its folder, {entry.get('file')!r}; nothing was read or removed"
            )
    return {entry["file"]: entry for entry in entries}


def read_brick(path: Path, entry: Mapping[str, Any]) -> BrickSpec:
    """The brick a suite file holds, checked against its manifest entry; a suite never refers to other files."""
    try:
        check_model_file(path)
        model = onnx.load(str(path), load_external_data=False)
    except ModelError as error:
        raise SuiteError(f"{path.name}: {error.cause}") from None
    except Exception as error:  # protobuf and onnx raise several types
        raise SuiteError(f"{path.name} is not a readable ONNX model: {error}") from error
    if any(tensor.data_location == onnx.TensorProto.EXTERNAL for tensor in model.graph.initializer):
        raise SuiteError(f"{path.name} refers to external data, which no exported brick does; refused, not read")
    graph = model.graph
    initializers = {tensor.name: tensor for tensor in graph.initializer}
    weights_as_inputs = frozenset(str(name) for name in entry.get("weights_as_inputs", ()))
    input_names = {value.name for value in graph.input} - weights_as_inputs
    tensor_outputs = [value for value in graph.output if value.type.HasField("tensor_type")]
    unsized = any(not value.type.tensor_type.HasField("shape") for value in [*graph.input, *tensor_outputs])
    try:
        listed = {item["name"]: item["shape"] for item in [*entry["inputs"], *entry["outputs"]] if "shape" in item}
        brick = BrickSpec(
            nodes=tuple(graph.node),
            inputs=tuple((value.name, _declared(value, listed)) for value in graph.input if value.name in input_names),
            weights=tuple(
                (tensor.name, TensorSpec(tensor.data_type, tuple(tensor.dims)))
                for tensor in graph.initializer
                if tensor.name not in input_names
            ),
            outputs=tuple((value.name, _declared(value, listed)) for value in tensor_outputs),
            values={name: numpy_helper.to_array(initializers[name]) for name in entry["real_values"]},
            opset_imports={opset.domain: opset.version for opset in model.opset_import},
            ir_version=model.ir_version,
            functions=tuple(model.functions),
            signature=str(entry["signature"]),
            non_tensor_outputs=tuple(
                (value.name, value.type.SerializeToString(deterministic=True))
                for value in graph.output
                if not value.type.HasField("tensor_type")
            ),
            activations=frozenset(str(name) for name in entry.get("activations", ())),
            unsized=unsized,
            weights_as_inputs=weights_as_inputs,
        )
    except (KeyError, TypeError, ValueError) as error:
        raise SuiteError(f"{path.name} does not hold what its manifest entry describes ({error})") from error
    if brick_signature(brick) != brick.signature:
        raise SuiteError(f"{path.name} does not match the signature its manifest gives; was the file changed?")
    return brick


def _declared(value: onnx.ValueInfoProto, listed: Mapping[str, Any]) -> TensorSpec:
    """The spec of a brick's input or output: its declared shape, or the manifest's for an unsized brick."""
    tensor_type = value.type.tensor_type
    if value.type.HasField("tensor_type") and not tensor_type.HasField("shape"):
        shape = listed[value.name]
        if not isinstance(shape, list) or not all(isinstance(size, int) and size >= 0 for size in shape):
            raise ValueError(f"the manifest gives {value.name} no shape of whole sizes")
        return TensorSpec(tensor_type.elem_type, tuple(shape))
    dims = tuple(dim.dim_value for dim in tensor_type.shape.dim)
    if not value.type.HasField("tensor_type") or any(not dim.HasField("dim_value") for dim in tensor_type.shape.dim):
        raise ValueError(f"{value.name} is not a tensor of fixed shape")
    return TensorSpec(tensor_type.elem_type, dims)


def exported_distances(entry: Mapping[str, Any], brick: BrickSpec) -> tuple[int, ...]:
    """A manifest entry's distances of the brick's inputs (see :func:`manifest_entry`); none where the entry
    lacks them (a suite of an older version) or holds what no export writes."""
    distances = entry.get("input_distances_bytes")
    if not isinstance(distances, list) or len(distances) != len(brick.inputs):
        return ()
    if not all(type(distance) is int and distance >= 0 for distance in distances):
        return ()
    return tuple(distances)


def exported_work(entry: Mapping[str, Any], brick: BrickSpec) -> BrickWork | None:
    """A manifest entry's work of the brick's layers (see :func:`manifest_entry`); None where the entry lacks it (a
    suite of an older version) or holds what no export writes for this brick."""
    layers = entry.get("layers")
    if not isinstance(layers, list) or len(layers) != len(brick.nodes):
        return None
    found = []
    for layer, op_type in zip(layers, brick.ops):
        if not (isinstance(layer, list) and len(layer) == 3 and layer[0] == op_type):
            return None
        flops, size = layer[1], layer[2]
        if not (flops is None or (type(flops) is int and flops >= 0)) or not (type(size) is int and size >= 0):
            return None
        found.append(LayerWork(op_type, flops, size))
    return BrickWork(brick.label, tuple(found), (len(brick.inputs), brick.output_count))


def exported_reads(entry: Mapping[str, Any]) -> tuple[float | None, int]:
    """A manifest entry's FLOPs and the bytes the rest of the brick's model reads (see :func:`manifest_entry`);
    (None, 0) where the entry lacks them (a suite of an older version) or holds what no export writes."""
    flops, rest = entry.get("flops"), entry.get("rest_of_model_bytes")
    if type(rest) is not int or rest < 0:
        return None, 0
    if not isinstance(flops, int | float) or isinstance(flops, bool) or not math.isfinite(flops) or flops < 0:
        return None, rest
    return float(flops), rest
