"""Fuzzing: loading and cutting mutated models raise nothing but ModelError, and never hang.

Valid models (the bundled samples and a few tiny ones with subgraphs and external data) are mutated
at two levels: their bytes (bit flips, cuts, insertions, repeated slices) and their protobuf fields
(any field of any message: numbers set to edge values, names swapped or made hostile, repeated
fields emptied, shortened or grown, messages cleared). Cases are seeded, so a failure replays;
``DLBRICKS_FUZZ_CASES=5000 pytest tests/test_fuzz.py`` runs a longer campaign.
"""

from __future__ import annotations

import os
import random
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import onnx
import pytest
import tiny_models
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from conftest import SAMPLE_MODELS
from pytest_dlbricks.core import runtime
from pytest_dlbricks.core.errors import ModelError
from pytest_dlbricks.core.settings import Settings
from pytest_dlbricks.cut.cutting import plan_model
from pytest_dlbricks.cut.loading import load_model

CASES = int(os.environ.get("DLBRICKS_FUZZ_CASES", "2000"))
#: Every other case is cut from the graph onnxruntime optimizes, the default, and so goes through it.
OPTIMIZED = Settings(granularity=2, intra_op_threads=1)
#: onnxruntime stops a reference run after this long (mutated Loops may be told to run 2**62 times).
RUN_SECONDS = 1.0
#: A case that takes longer than this hangs, for the purpose of the test (typical cases take milliseconds).
CASE_SECONDS = 10 * RUN_SECONDS
EDGE_INTEGERS = (0, 1, -1, 2, 3, 7, 16, 255, 1 << 31, -(1 << 31), (1 << 62), -(1 << 62), (1 << 63) - 1)
EDGE_FLOATS = (0.0, -0.0, 1.0, -1.0, 1e-45, 1e38, float("inf"), float("-inf"), float("nan"))
HOSTILE_TEXTS = ("", "x", "../escape.bin", "/etc/hostname", "a\0b", "é" * 3, "n" * 10_000, "com.microsoft", "If")
_INTEGER_RANGES = {
    FieldDescriptor.TYPE_INT32: (-(1 << 31), (1 << 31) - 1),
    FieldDescriptor.TYPE_INT64: (-(1 << 63), (1 << 63) - 1),
    FieldDescriptor.TYPE_UINT64: (0, (1 << 64) - 1),
    FieldDescriptor.TYPE_ENUM: (-(1 << 31), (1 << 31) - 1),
}


def seed_models(folder: Path) -> list[Path]:
    """Valid models to mutate; those with external data keep their weight file beside them."""
    folder.mkdir()
    seeds = [Path(shutil.copy(path, folder)) for path in sorted(SAMPLE_MODELS.glob("*.onnx"))]
    for build in (tiny_models.loop_outer_scope, tiny_models.if_outer_scope, tiny_models.computed_reshape):
        seeds.append(build(folder))
    seeds.append(tiny_models.external_weights(folder))
    return seeds


def messages(message: Message) -> Iterator[Message]:
    """``message`` and every message inside it."""
    yield message
    for field in message.DESCRIPTOR.fields:
        if field.type != FieldDescriptor.TYPE_MESSAGE:
            continue
        if _is_repeated(field):
            for inner in getattr(message, field.name):
                yield from messages(inner)
        elif message.HasField(field.name):
            yield from messages(getattr(message, field.name))


def _is_repeated(field: FieldDescriptor) -> bool:
    is_repeated = getattr(field, "is_repeated", None)  # protobuf 6+; older versions only have label
    return bool(is_repeated) if is_repeated is not None else field.label == FieldDescriptor.LABEL_REPEATED


def mutate_field(model: onnx.ModelProto, rng: random.Random) -> None:
    """Change one field of one message of ``model`` to a value chosen to break assumptions."""
    names = [name for node in model.graph.node for name in [*node.input, *node.output]] or ["x"]
    message = rng.choice(list(messages(model)))
    field = rng.choice(message.DESCRIPTOR.fields)
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        _mutate_messages(message, field, rng)
    elif _is_repeated(field):
        _mutate_scalars(getattr(message, field.name), lambda: _scalar(field, rng, names), rng)
    else:
        try:
            setattr(message, field.name, _scalar(field, rng, names))
        except ValueError:  # a closed enum refuses numbers it does not define
            message.ClearField(field.name)


def _mutate_messages(message: Message, field: FieldDescriptor, rng: random.Random) -> None:
    if not _is_repeated(field):
        message.ClearField(field.name)
        return
    values = getattr(message, field.name)
    if not values or rng.random() < 0.2:
        values.add()
    elif rng.random() < 0.5:
        del values[rng.randrange(len(values))]
    else:
        values.add().CopyFrom(values[rng.randrange(len(values))])


def _mutate_scalars(values: list[object], make: Callable[[], object], rng: random.Random) -> None:
    choice = rng.random()
    try:
        if not values or choice < 0.3:
            values.append(make())
        elif choice < 0.6:
            values[rng.randrange(len(values))] = make()
        elif choice < 0.8:
            del values[rng.randrange(len(values))]
        else:
            del values[:]
    except ValueError:  # a closed enum refuses numbers it does not define
        pass


def _scalar(field: FieldDescriptor, rng: random.Random, names: list[str]) -> object:
    if field.type in _INTEGER_RANGES:
        low, high = _INTEGER_RANGES[field.type]
        value = rng.choice(EDGE_INTEGERS) if rng.random() < 0.8 else rng.randint(-100, 100)
        return min(max(value, low), high)
    if field.type in (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE):
        return rng.choice(EDGE_FLOATS)
    if field.type == FieldDescriptor.TYPE_BOOL:
        return rng.random() < 0.5
    if field.type == FieldDescriptor.TYPE_BYTES:
        return rng.randbytes(rng.choice((0, 1, 3, 8, 64)))
    return rng.choice(names) if rng.random() < 0.6 else rng.choice(HOSTILE_TEXTS)


def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    """Flip bits, cut, insert or repeat a slice of the serialized model."""
    if not data:
        return rng.randbytes(rng.randint(1, 64))
    buffer = bytearray(data)
    kind = rng.choice(("flip", "cut", "insert", "repeat"))
    position = rng.randrange(len(buffer))
    if kind == "flip":
        for _ in range(rng.randint(1, 8)):
            buffer[rng.randrange(len(buffer))] ^= 1 << rng.randrange(8)
    elif kind == "cut":
        del buffer[position : position + rng.choice((1, 4, 64, len(buffer)))]
    elif kind == "insert":
        buffer[position:position] = rng.randbytes(rng.choice((1, 2, 8, 32)))
    else:
        end = min(len(buffer), position + rng.randint(1, 256))
        buffer[position:position] = buffer[position:end]
    return bytes(buffer)


def mutant(seed: Path, rng: random.Random) -> bytes:
    """One to three mutations of ``seed``'s bytes, of its fields, or of both."""
    data = seed.read_bytes()
    for _ in range(rng.randint(1, 3)):
        if rng.random() < 0.35:
            data = mutate_bytes(data, rng)
            continue
        model = onnx.ModelProto()
        try:
            model.ParseFromString(data)
        except Exception:  # an earlier byte mutation broke the protobuf: keep mutating bytes
            data = mutate_bytes(data, rng)
            continue
        mutate_field(model, rng)
        data = model.SerializeToString()
    return data


def test_loading_and_cutting_mutants_raise_only_model_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime, "RUN_TIME_LIMIT_S", RUN_SECONDS)
    seeds = seed_models(tmp_path / "seeds")
    rng = random.Random(20200420)
    outcomes = {"loaded": 0, "refused": 0}
    slowest = 0.0
    for case in range(CASES):
        seed = rng.choice(seeds)
        path = seed.parent / f"mutant{case}.onnx"
        path.write_bytes(mutant(seed, rng))
        start = time.perf_counter()
        try:
            graph = load_model(path, {"batch": 2}, optimize=OPTIMIZED if case % 2 else None)
            plan_model(graph, rng.randint(1, 4), path.name)
        except ModelError as error:
            assert error.path == str(path) and error.cause.strip(), f"case {case} from {seed.name}"
            outcomes["refused"] += 1
        except Exception as error:
            pytest.fail(f"case {case} (mutant of {seed.name}) raised {type(error).__name__}: {error}")
        else:
            outcomes["loaded"] += 1
        slowest = max(slowest, time.perf_counter() - start)
        assert slowest < CASE_SECONDS, f"case {case} (mutant of {seed.name}) took {slowest:.1f} s"
        path.unlink()
    # Both kinds must occur, or the mutations are too weak (all load) or too crude (all refused).
    assert outcomes["loaded"] > CASES / 10 and outcomes["refused"] > CASES / 10, outcomes
