"""Sample inputs of a model: the user's real data, found beside the model or given by a conftest hook.

Where a model's inputs decide what work is done (an ``If`` chosen by a sample rate, token ids, the
number of boxes a detector keeps), synthetic inputs describe a run nobody makes. Two conventions are
found without configuration, in this order: a sidecar ``<model>.npz`` beside the model (one array
per input name), then ONNX's own layout, ``test_data_set_*/input_*.pb`` in the model's folder (the
first set by number; each file a ``TensorProto``, named after its input, or else matched to the
inputs in their order). A conftest's ``pytest_dlbricks_model_inputs`` hook wins over both.

Sample files are read as untrusted data: no pickle, only files inside the model's folder, no file
or array larger than the memory limit that applies to the model's own tensors.
"""

from __future__ import annotations

import hashlib
import re
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from ..core.errors import ModelError, describe_error
from ..core.graph import format_bytes, memory_limit

#: What reports say of a model run on synthetic inputs.
SYNTHETIC = "synthetic"
#: Where the hook's inputs come from, as reports name it.
HOOK_SOURCE = "pytest_dlbricks_model_inputs"
_SET = re.compile(r"test_data_set_(\d+)")
_INPUT = re.compile(r"input_(\d+)\.pb")


@dataclass(frozen=True)
class SampleInputs:
    """Real values for some or all of a model's inputs, and where each came from (for messages)."""

    #: Where they were found, as reports show it: ``test_data_set_0``, ``model.npz`` or the hook's name.
    source: str
    values: Mapping[str, np.ndarray]
    #: The file each input was read from (the source itself for the hook and the ``.npz``).
    files: Mapping[str, str]

    def digest(self) -> str:
        """SHA-256 over names, types, shapes and bytes: a changed sample makes a new plan."""
        sha = hashlib.sha256()
        for name in sorted(self.values):
            value = self.values[name]
            sha.update(f"{name}\0{value.dtype.str}\0{value.shape}\0".encode())
            sha.update(repr(value.tolist()).encode() if value.dtype.kind in "OSU" else value.tobytes())
        return sha.hexdigest()


def find_samples(model_path: Path) -> SampleInputs | None:
    """The sample inputs the conventions find for ``model_path``; raises :class:`ModelError` for bad ones."""
    folder = model_path.parent
    sidecar = model_path.with_suffix(".npz")
    if sidecar.exists():
        return _read_npz(model_path, sidecar)
    sets = sorted(
        (int(match.group(1)), entry)
        for entry in folder.iterdir()
        if (match := _SET.fullmatch(entry.name)) and entry.is_dir()
    )
    return _read_test_data_set(model_path, sets[0][1]) if sets else None


def from_hook(model_path: Path, values: object) -> SampleInputs:
    """Inputs a conftest returned, checked to be a mapping of names to arrays."""
    if not isinstance(values, Mapping) or not all(isinstance(name, str) for name in values):
        raise ModelError(
            model_path, f"the {HOOK_SOURCE} hook must return a mapping of input names to arrays, not {type(values)}"
        )
    arrays = {}
    for name, value in values.items():
        try:
            arrays[name] = _as_input(np.asarray(value))
        except (TypeError, ValueError) as error:
            raise ModelError(
                model_path,
                f"the {HOOK_SOURCE} hook gives input {name!r} a value that is not an array: {describe_error(error)}",
            ) from None
        _check_size(model_path, f"sample input {name!r} from the {HOOK_SOURCE} hook", arrays[name].nbytes)
    return SampleInputs(HOOK_SOURCE, arrays, dict.fromkeys(arrays, HOOK_SOURCE))


def _read_npz(model_path: Path, file: Path) -> SampleInputs:
    where = _inside(model_path, file)
    limit = memory_limit()
    try:
        with zipfile.ZipFile(file) as archive:
            for info in archive.infolist():
                if info.file_size > limit:
                    name = info.filename.removesuffix(".npy")
                    raise ModelError(
                        model_path,
                        f"sample input {name!r} in {where} would need"
                        f" {format_bytes(info.file_size)}, more than the {format_bytes(limit)} memory limit",
                    )
        with np.load(file, allow_pickle=False) as data:
            values = {name: _as_input(data[name]) for name in data.files}
    except ModelError:
        raise
    except Exception as error:  # zipfile, numpy's format reader and pickle refusal raise several types
        raise ModelError(
            model_path, f"sample inputs {where} cannot be read as an .npz: {describe_error(error)}"
        ) from None
    return SampleInputs(file.name, values, dict.fromkeys(values, where))


def _read_test_data_set(model_path: Path, folder: Path) -> SampleInputs:
    _inside(model_path, folder)
    files = sorted(
        (int(match.group(1)), entry) for entry in folder.iterdir() if (match := _INPUT.fullmatch(entry.name))
    )
    if not files:
        raise ModelError(model_path, f"sample folder {folder.name} holds no input_K.pb file")
    values: dict[str, np.ndarray] = {}
    where: dict[str, str] = {}
    for position, (_, file) in enumerate(files):
        shown = _inside(model_path, file)
        _check_size(model_path, f"sample input file {shown}", file.stat().st_size)
        tensor = onnx.TensorProto()
        try:
            tensor.ParseFromString(file.read_bytes())
        except Exception as error:  # protobuf's DecodeError
            raise ModelError(
                model_path, f"sample input {shown} is not a readable TensorProto: {describe_error(error)}"
            ) from None
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            # onnx would read it from a path relative to where pytest runs, wherever that leads.
            raise ModelError(model_path, f"sample input {shown} keeps its values in another file; write them in it")
        try:
            value = _as_input(numpy_helper.to_array(tensor))
        except Exception as error:  # onnx's ValueError/TypeError on bad data
            raise ModelError(
                model_path, f"sample input {shown} is not a readable TensorProto: {describe_error(error)}"
            ) from None
        # A file without a name feeds the model input of its position; the loader checks both.
        name = tensor.name or f"#{position}"
        values[name] = value
        where[name] = shown
    return SampleInputs(folder.name, values, where)


def match_inputs(model_path: Path, sample: SampleInputs, inputs: Sequence[onnx.ValueInfoProto]) -> SampleInputs:
    """``sample`` checked against the model's ``inputs`` (initializers excluded): every value names an
    input (an unnamed one the input of its position) of its element type and rank, and fits the sizes
    the model fixes. Raises :class:`ModelError` naming the file and the input."""
    declared = {value.name: value for value in inputs}
    order = [value.name for value in inputs]
    values, files = {}, {}
    for key, value in sample.values.items():
        where = sample.files[key]
        name = key
        if key.startswith("#"):
            position = int(key[1:])
            if position >= len(order):
                raise ModelError(
                    model_path,
                    f"sample input {where} has no name, and the model has no input"
                    f" number {position} (it has {len(order)})",
                )
            name = order[position]
        if name not in declared:
            raise ModelError(
                model_path,
                f"sample input {name!r} in {where} is not an input of the model (its inputs: {', '.join(order)})",
            )
        _check_type(model_path, where, name, value, declared[name].type)
        values[name], files[name] = value, where
    return SampleInputs(sample.source, values, files)


def _check_type(model_path: Path, where: str, name: str, value: np.ndarray, declared: onnx.TypeProto) -> None:
    if not declared.HasField("tensor_type"):
        raise ModelError(model_path, f"sample input {name!r} in {where}: the model's input is not a tensor")
    tensor_type = declared.tensor_type
    if tensor_type.elem_type not in onnx.helper.get_all_tensor_dtypes():
        raise ModelError(model_path, f"input {name!r} has no element type onnx knows ({tensor_type.elem_type})")
    expected = onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)
    if (value.dtype.kind == "O") != (expected.kind == "O") or (expected.kind != "O" and value.dtype != expected):
        wanted = onnx.TensorProto.DataType.Name(tensor_type.elem_type).lower()
        raise ModelError(
            model_path, f"sample input {name!r} in {where} holds {value.dtype} values, but the model takes {wanted}"
        )
    if not tensor_type.HasField("shape"):
        return
    dims = tensor_type.shape.dim
    fixed = [dim.dim_value if dim.HasField("dim_value") and dim.dim_value > 0 else None for dim in dims]
    if len(fixed) != value.ndim or any(size is not None and size != got for size, got in zip(fixed, value.shape)):
        shown = [size if size is not None else (dim.dim_param or "?") for size, dim in zip(fixed, dims)]
        raise ModelError(
            model_path, f"sample input {name!r} in {where} has shape {list(value.shape)}, but the model takes {shown}"
        )


def _as_input(value: np.ndarray) -> np.ndarray:
    """Text as onnxruntime takes it (an object array of str); other arrays as they are, 0-d kept 0-d."""
    if value.dtype.kind in "SU":
        return value.astype(str).astype(object)
    if value.dtype.kind == "O" and not all(isinstance(item, str) for item in value.ravel()):
        raise TypeError("an object array that is not text")
    return value


def _inside(model_path: Path, file: Path) -> str:
    """``file`` relative to the model's folder; refused when it (or a link it is) lies outside."""
    folder = model_path.parent.resolve()
    if not file.resolve().is_relative_to(folder):
        raise ModelError(model_path, f"sample input {file.name} lies outside the model's folder; refused, not read")
    return str(file.relative_to(model_path.parent))


def _check_size(model_path: Path, what: str, size: int) -> None:
    limit = memory_limit()
    if size > limit:
        raise ModelError(
            model_path,
            f"{what} holds {format_bytes(size)}, more than the {format_bytes(limit)} memory limit; refused",
        )
