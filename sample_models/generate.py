"""Regenerate the small ONNX sample models used by pytest-dlbricks.

The plugin cuts ONNX models into "bricks" and benchmarks them with
onnxruntime.  Its tests and examples need a handful of small but
structurally varied models, and checking in opaque binaries without a way
to rebuild them is fragile.  This script builds every sample model from
scratch with plain ``onnx`` + ``numpy`` (no deep-learning framework), so the
models can be inspected, modified and regenerated at will:

* ``tiny_resnet.onnx``       - residual CNN with three identical (repeating)
                               blocks and a strided downsampling block.
* ``tiny_inception.onnx``    - branchy CNN: two inception modules with four
                               parallel branches joined by ``Concat``.
* ``mlp.onnx``               - plain multi-layer perceptron with repeating
                               hidden layers and a ``Softmax`` head.
* ``transformer_block.onnx`` - one transformer encoder block whose head
                               reshapes are computed at run time from the
                               input shape (``Shape``/``Gather``/``Concat``).
* ``tiny_rnn.onnx``          - ``LSTM`` followed by ``GRU`` plus a ``Loop``
                               whose body reads an outer-scope tensor.

Usage (from the repository root)::

    python sample_models/generate.py

The ``.onnx`` files are written next to this script.  Output is
deterministic: weights come from ``np.random.default_rng(0)`` (re-seeded for
every model) and running the script twice produces byte-identical files.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUTPUT_DIR = Path(__file__).resolve().parent
SEED = 0
OPSET = 17
# onnx >= 1.16 stamps a newer IR version than some onnxruntime builds accept.
IR_VERSION = 8
PRODUCER = "pytest-dlbricks sample_models/generate.py"

FLOAT = TensorProto.FLOAT
INT64 = TensorProto.INT64
BOOL = TensorProto.BOOL


# --------------------------------------------------------------------------
# Generic graph-building helpers
# --------------------------------------------------------------------------


class GraphBuilder:
    """Accumulates nodes, initializers and graph inputs/outputs.

    Naming convention: a node is called after its *scope* (e.g.
    ``block1.conv1``), its single output is ``<scope>.out`` and its weights
    are ``<scope>.weight`` / ``<scope>.bias`` (PyTorch-like names).
    """

    def __init__(self, name: str, rng: np.random.Generator | None = None):
        self.name = name
        self.rng = rng
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []

    # -- graph interface ---------------------------------------------------

    def add_input(self, name: str, elem_type: int, shape) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, elem_type, shape))
        return name

    def add_output(self, name: str, elem_type: int, shape) -> str:
        self.outputs.append(helper.make_tensor_value_info(name, elem_type, shape))
        return name

    # -- constants and weights ---------------------------------------------

    def constant(self, name: str, value) -> str:
        """Store ``value`` (numpy array, dtype preserved) as an initializer."""
        self.initializers.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(self, name: str, shape, fan_in: int) -> str:
        """He-initialised float32 weight of ``shape``."""
        std = math.sqrt(2.0 / fan_in)
        value = self.rng.normal(0.0, std, size=shape).astype(np.float32)
        return self.constant(name, value)

    def small(self, name: str, shape, scale: float = 0.1) -> str:
        """Small random float32 values (biases, BN statistics, ...)."""
        value = (scale * self.rng.standard_normal(size=shape)).astype(np.float32)
        return self.constant(name, value)

    # -- nodes -------------------------------------------------------------

    def op(self, op_type: str, inputs, scope: str, outputs=None, **attrs):
        """Append one node named ``scope``.

        ``outputs`` defaults to a single ``<scope>.out``; pass a list of names
        for multi-output nodes.  Returns the output name, or the list of
        names when ``outputs`` is given explicitly.
        """
        single = outputs is None
        out_names = [f"{scope}.out"] if single else list(outputs)
        self.nodes.append(helper.make_node(op_type, list(inputs), out_names, name=scope, **attrs))
        return out_names[0] if single else out_names

    # -- finalisation ------------------------------------------------------

    def graph(self, doc: str | None = None) -> onnx.GraphProto:
        return helper.make_graph(
            self.nodes,
            self.name,
            self.inputs,
            self.outputs,
            initializer=self.initializers,
            doc_string=doc,
        )

    def model(self, doc: str) -> onnx.ModelProto:
        model = helper.make_model(
            self.graph(doc),
            opset_imports=[helper.make_opsetid("", OPSET)],
            producer_name=PRODUCER,
            doc_string=doc,
        )
        model.ir_version = IR_VERSION
        return model


# --------------------------------------------------------------------------
# Reusable layer builders
# --------------------------------------------------------------------------


def conv(
    b: GraphBuilder, x: str, scope: str, c_in: int, c_out: int, kernel: int, stride: int = 1, bias: bool = True
) -> str:
    """2-D convolution with 'same' padding (for odd kernels)."""
    inputs = [x, b.weight(f"{scope}.weight", (c_out, c_in, kernel, kernel), fan_in=c_in * kernel * kernel)]
    if bias:
        inputs.append(b.small(f"{scope}.bias", (c_out,)))
    pad = kernel // 2
    return b.op(
        "Conv", inputs, scope, kernel_shape=[kernel, kernel], strides=[stride, stride], pads=[pad, pad, pad, pad]
    )


def batch_norm(b: GraphBuilder, x: str, scope: str, channels: int) -> str:
    scale = (1.0 + 0.1 * b.rng.standard_normal(channels)).astype(np.float32)
    var = b.rng.uniform(0.5, 1.5, size=channels).astype(np.float32)  # > 0
    inputs = [
        x,
        b.constant(f"{scope}.scale", scale),
        b.small(f"{scope}.bias", (channels,)),
        b.small(f"{scope}.running_mean", (channels,)),
        b.constant(f"{scope}.running_var", var),
    ]
    return b.op("BatchNormalization", inputs, scope, epsilon=1e-5)


def relu(b: GraphBuilder, x: str, scope: str) -> str:
    return b.op("Relu", [x], scope)


def conv_bn(b: GraphBuilder, x: str, scope: str, c_in: int, c_out: int, kernel: int, stride: int = 1) -> str:
    """Conv (bias folded into BN, so none) followed by BatchNormalization."""
    y = conv(b, x, f"{scope}.conv", c_in, c_out, kernel, stride, bias=False)
    return batch_norm(b, y, f"{scope}.bn", c_out)


def conv_bn_relu(b: GraphBuilder, x: str, scope: str, c_in: int, c_out: int, kernel: int, stride: int = 1) -> str:
    return relu(b, conv_bn(b, x, scope, c_in, c_out, kernel, stride), f"{scope}.relu")


def conv_relu(b: GraphBuilder, x: str, scope: str, c_in: int, c_out: int, kernel: int) -> str:
    return relu(b, conv(b, x, f"{scope}.conv", c_in, c_out, kernel), f"{scope}.relu")


def gemm(b: GraphBuilder, x: str, scope: str, n_in: int, n_out: int) -> str:
    """Fully connected layer ``x @ W.T + b`` (PyTorch weight layout)."""
    w = b.weight(f"{scope}.weight", (n_out, n_in), fan_in=n_in)
    bias = b.small(f"{scope}.bias", (n_out,))
    return b.op("Gemm", [x, w, bias], scope, transB=1)


def linear(b: GraphBuilder, x: str, scope: str, n_in: int, n_out: int) -> str:
    """MatMul + Add on the last axis (works for any leading dims)."""
    w = b.weight(f"{scope}.weight", (n_in, n_out), fan_in=n_in)
    y = b.op("MatMul", [x, w], f"{scope}.matmul")
    return b.op("Add", [y, b.small(f"{scope}.bias", (n_out,))], f"{scope}.add")


def classifier_head(b: GraphBuilder, x: str, channels: int, classes: int, output: str) -> str:
    """GlobalAveragePool -> Flatten -> Gemm, writing to graph output ``output``."""
    pooled = b.op("GlobalAveragePool", [x], "head.pool")
    flat = b.op("Flatten", [pooled], "head.flatten", axis=1)
    w = b.weight("head.fc.weight", (classes, channels), fan_in=channels)
    bias = b.small("head.fc.bias", (classes,))
    return b.op("Gemm", [flat, w, bias], "head.fc", outputs=[output], transB=1)[0]


def layer_norm(b: GraphBuilder, x: str, scope: str, dim: int) -> str:
    gamma = (1.0 + 0.1 * b.rng.standard_normal(dim)).astype(np.float32)
    inputs = [x, b.constant(f"{scope}.weight", gamma), b.small(f"{scope}.bias", (dim,))]
    return b.op("LayerNormalization", inputs, scope, axis=-1, epsilon=1e-5)


def gelu(b: GraphBuilder, x: str, scope: str) -> str:
    """Exact GELU, 0.5 * x * (1 + erf(x / sqrt(2))), from basic ops."""
    scaled = b.op("Div", [x, b.constant(f"{scope}.sqrt2", np.float32(math.sqrt(2.0)))], f"{scope}.div")
    erf = b.op("Erf", [scaled], f"{scope}.erf")
    one_plus = b.op("Add", [erf, b.constant(f"{scope}.one", np.float32(1.0))], f"{scope}.add")
    half_x = b.op("Mul", [x, b.constant(f"{scope}.half", np.float32(0.5))], f"{scope}.half_x")
    return b.op("Mul", [half_x, one_plus], f"{scope}.mul")


def ints(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


# --------------------------------------------------------------------------
# 1. tiny_resnet
# --------------------------------------------------------------------------


def residual_block(b: GraphBuilder, x: str, scope: str, c_in: int, c_out: int, stride: int = 1) -> str:
    """Conv-BN-Relu-Conv-BN + skip, then Relu.

    When the shape changes the skip path gets a strided 1x1 conv + BN
    projection.
    """
    y = conv_bn_relu(b, x, f"{scope}.block1", c_in, c_out, 3, stride)
    y = conv_bn(b, y, f"{scope}.block2", c_out, c_out, 3)
    skip = x
    if stride != 1 or c_in != c_out:
        skip = conv_bn(b, x, f"{scope}.downsample", c_in, c_out, 1, stride)
    added = b.op("Add", [y, skip], f"{scope}.add")
    return relu(b, added, f"{scope}.relu")


def build_tiny_resnet(rng: np.random.Generator) -> onnx.ModelProto:
    b = GraphBuilder("tiny_resnet", rng)
    x = b.add_input("image", FLOAT, ["batch", 3, 32, 32])
    x = conv_bn_relu(b, x, "stem", 3, 16, 3)
    for i in range(1, 4):  # identical blocks -> repeating bricks
        x = residual_block(b, x, f"layer1.{i}", 16, 16)
    x = residual_block(b, x, "layer2.1", 16, 32, stride=2)
    classifier_head(b, x, 32, 10, "logits")
    b.add_output("logits", FLOAT, ["batch", 10])
    return b.model(
        "Tiny residual CNN: stem, 3 identical residual blocks at "
        "16 channels, one strided downsampling block, classifier."
    )


# --------------------------------------------------------------------------
# 2. tiny_inception
# --------------------------------------------------------------------------


def inception_module(
    b: GraphBuilder, x: str, scope: str, c_in: int, c1: int, c3: tuple[int, int], c5: tuple[int, int], c_pool: int
) -> tuple[str, int]:
    """Four parallel branches concatenated along channels."""
    branch1 = conv_relu(b, x, f"{scope}.branch1x1", c_in, c1, 1)

    branch3 = conv_relu(b, x, f"{scope}.branch3x3_reduce", c_in, c3[0], 1)
    branch3 = conv_relu(b, branch3, f"{scope}.branch3x3", c3[0], c3[1], 3)

    branch5 = conv_relu(b, x, f"{scope}.branch5x5_reduce", c_in, c5[0], 1)
    branch5 = conv_relu(b, branch5, f"{scope}.branch5x5", c5[0], c5[1], 5)

    pooled = b.op(
        "MaxPool", [x], f"{scope}.branch_pool.maxpool", kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1]
    )
    branch_pool = conv_relu(b, pooled, f"{scope}.branch_pool", c_in, c_pool, 1)

    out = b.op("Concat", [branch1, branch3, branch5, branch_pool], f"{scope}.concat", axis=1)
    return out, c1 + c3[1] + c5[1] + c_pool


def build_tiny_inception(rng: np.random.Generator) -> onnx.ModelProto:
    b = GraphBuilder("tiny_inception", rng)
    x = b.add_input("image", FLOAT, ["batch", 3, 32, 32])
    x = conv_relu(b, x, "stem", 3, 16, 3)
    x, c = inception_module(b, x, "inception1", 16, 8, (8, 12), (4, 6), 6)
    x, c = inception_module(b, x, "inception2", c, 12, (12, 16), (4, 8), 8)
    classifier_head(b, x, c, 10, "logits")
    b.add_output("logits", FLOAT, ["batch", 10])
    return b.model(
        "Tiny inception-like CNN: stem conv and two inception modules (1x1 / 3x3 / 5x5 / pool branches + Concat)."
    )


# --------------------------------------------------------------------------
# 3. mlp
# --------------------------------------------------------------------------


def build_mlp(rng: np.random.Generator) -> onnx.ModelProto:
    b = GraphBuilder("mlp", rng)
    x = b.add_input("features", FLOAT, ["batch", 64])
    width = 64
    for i in range(1, 5):  # fc2..fc4 are identical 128->128 layers
        x = relu(b, gemm(b, x, f"fc{i}", width, 128), f"fc{i}.relu")
        width = 128
    logits = gemm(b, x, "classifier", width, 10)
    b.op("Softmax", [logits], "softmax", outputs=["probabilities"], axis=-1)
    b.add_output("probabilities", FLOAT, ["batch", 10])
    return b.model("Multi-layer perceptron: 4 Gemm+Relu layers (hidden 128), Gemm classifier and Softmax.")


# --------------------------------------------------------------------------
# 4. transformer_block
# --------------------------------------------------------------------------

VOCAB, D_MODEL, N_HEADS, D_FF = 100, 32, 4, 128
D_HEAD = D_MODEL // N_HEADS


def runtime_shapes(b: GraphBuilder, tokens: str) -> tuple[str, str]:
    """Compute reshape targets from the token tensor's run-time shape.

    Returns (heads_shape = [batch, seq, heads, d_head],
             merged_shape = [batch, seq, d_model]) as int64 tensors.
    """
    shape = b.op("Shape", [tokens], "shape.tokens")
    batch = b.op("Gather", [shape, b.constant("shape.batch_index", ints(0))], "shape.batch", axis=0)
    seq = b.op("Gather", [shape, b.constant("shape.seq_index", ints(1))], "shape.seq", axis=0)
    heads_shape = b.op(
        "Concat", [batch, seq, b.constant("shape.heads_dims", ints(N_HEADS, D_HEAD))], "shape.heads", axis=0
    )
    merged_shape = b.op("Concat", [batch, seq, b.constant("shape.model_dim", ints(D_MODEL))], "shape.merged", axis=0)
    return heads_shape, merged_shape


def attention_projection(b: GraphBuilder, x: str, scope: str, heads_shape: str, perm: list[int]) -> str:
    """Linear projection, split into heads and transpose with ``perm``."""
    y = linear(b, x, scope, D_MODEL, D_MODEL)
    y = b.op("Reshape", [y, heads_shape], f"{scope}.split_heads")
    return b.op("Transpose", [y], f"{scope}.transpose", perm=perm)


def self_attention(b: GraphBuilder, x: str, scope: str, heads_shape: str, merged_shape: str) -> str:
    # [batch, heads, seq, d_head]; keys pre-transposed to [batch, heads, d_head, seq]
    q = attention_projection(b, x, f"{scope}.q_proj", heads_shape, [0, 2, 1, 3])
    k = attention_projection(b, x, f"{scope}.k_proj", heads_shape, [0, 2, 3, 1])
    v = attention_projection(b, x, f"{scope}.v_proj", heads_shape, [0, 2, 1, 3])

    scores = b.op("MatMul", [q, k], f"{scope}.scores")
    scale = b.constant(f"{scope}.scale", np.float32(math.sqrt(D_HEAD)))
    scores = b.op("Div", [scores, scale], f"{scope}.scaled_scores")
    probs = b.op("Softmax", [scores], f"{scope}.softmax", axis=-1)
    context = b.op("MatMul", [probs, v], f"{scope}.context")
    context = b.op("Transpose", [context], f"{scope}.context_transpose", perm=[0, 2, 1, 3])
    context = b.op("Reshape", [context, merged_shape], f"{scope}.merge_heads")
    return linear(b, context, f"{scope}.out_proj", D_MODEL, D_MODEL)


def feed_forward(b: GraphBuilder, x: str, scope: str) -> str:
    h = linear(b, x, f"{scope}.fc1", D_MODEL, D_FF)
    h = gelu(b, h, f"{scope}.gelu")
    return linear(b, h, f"{scope}.fc2", D_FF, D_MODEL)


def build_transformer_block(rng: np.random.Generator) -> onnx.ModelProto:
    b = GraphBuilder("transformer_block", rng)
    tokens = b.add_input("tokens", INT64, ["batch", "seq"])
    table = b.constant("embedding.weight", (0.1 * rng.standard_normal((VOCAB, D_MODEL))).astype(np.float32))
    x = b.op("Gather", [table, tokens], "embedding", axis=0)

    heads_shape, merged_shape = runtime_shapes(b, tokens)

    h = layer_norm(b, x, "encoder.ln1", D_MODEL)
    h = self_attention(b, h, "encoder.attn", heads_shape, merged_shape)
    x = b.op("Add", [x, h], "encoder.residual1")

    h = layer_norm(b, x, "encoder.ln2", D_MODEL)
    h = feed_forward(b, h, "encoder.ffn")
    b.op("Add", [x, h], "encoder.residual2", outputs=["hidden_states"])

    b.add_output("hidden_states", FLOAT, ["batch", "seq", D_MODEL])
    return b.model(
        f"One pre-LN transformer encoder block (d_model={D_MODEL}, "
        f"{N_HEADS} heads, vocab={VOCAB}) with run-time computed "
        "head reshapes."
    )


# --------------------------------------------------------------------------
# 5. tiny_rnn
# --------------------------------------------------------------------------

SEQ_LEN, RNN_IN, RNN_HIDDEN, RNN_OUT, LOOP_STEPS = 8, 16, 32, 4, 3


def recurrent_weights(b: GraphBuilder, scope: str, gates: int, n_in: int) -> list[str]:
    """W, R, B inputs for a single-direction LSTM (gates=4) or GRU (gates=3)."""
    rows = gates * RNN_HIDDEN
    return [
        b.weight(f"{scope}.W", (1, rows, n_in), fan_in=n_in + RNN_HIDDEN),
        b.weight(f"{scope}.R", (1, rows, RNN_HIDDEN), fan_in=n_in + RNN_HIDDEN),
        b.small(f"{scope}.B", (1, 2 * rows)),
    ]


def squeeze(b: GraphBuilder, x: str, scope: str, axis: int) -> str:
    return b.op("Squeeze", [x, b.constant(f"{scope}.axes", ints(axis))], scope)


def refine_loop_body(state_name: str, context: str) -> onnx.GraphProto:
    """Loop body: state <- tanh(decay * state + context).

    ``context`` is *not* a body input: it is read from the outer graph.
    """
    body = GraphBuilder("refine_loop_body")
    body.add_input("refine_loop.iteration", INT64, [])
    cond_in = body.add_input("refine_loop.cond_in", BOOL, [])
    state_in = body.add_input("refine_loop.state_in", FLOAT, ["batch", RNN_HIDDEN])
    decay = body.op("Constant", [], "refine_loop.decay", value=numpy_helper.from_array(np.array(0.5, dtype=np.float32)))
    scaled = body.op("Mul", [state_in, decay], "refine_loop.mul")
    shifted = body.op("Add", [scaled, context], "refine_loop.add_context")
    body.op("Tanh", [shifted], "refine_loop.tanh", outputs=[state_name])
    body.op("Identity", [cond_in], "refine_loop.cond", outputs=["refine_loop.cond_out"])
    body.add_output("refine_loop.cond_out", BOOL, [])
    body.add_output(state_name, FLOAT, ["batch", RNN_HIDDEN])
    return body.graph("Loop body reading the outer-scope tensor " + context)


def build_tiny_rnn(rng: np.random.Generator) -> onnx.ModelProto:
    b = GraphBuilder("tiny_rnn", rng)
    x = b.add_input("sequence", FLOAT, [SEQ_LEN, "batch", RNN_IN])

    # LSTM: Y [seq, 1, batch, hidden], Y_h [1, batch, hidden]
    lstm_y, lstm_h = b.op(
        "LSTM",
        [x, *recurrent_weights(b, "lstm", 4, RNN_IN)],
        "lstm",
        outputs=["lstm.Y", "lstm.Y_h"],
        hidden_size=RNN_HIDDEN,
    )
    lstm_seq = squeeze(b, lstm_y, "lstm.squeeze_directions", axis=1)
    lstm_last = squeeze(b, lstm_h, "lstm.squeeze_last_hidden", axis=0)

    (gru_y,) = b.op(
        "GRU",
        [lstm_seq, *recurrent_weights(b, "gru", 3, RNN_HIDDEN)],
        "gru",
        outputs=["gru.Y"],
        hidden_size=RNN_HIDDEN,
        linear_before_reset=1,
    )
    # Last time step: Gather index -1 on the time axis -> [1, batch, hidden]
    last = b.op("Gather", [gru_y, b.constant("gru.last_step_index", np.int64(-1))], "gru.last_step", axis=0)
    last = squeeze(b, last, "gru.squeeze_directions", axis=0)

    # Control flow: a Loop refining the GRU features with the LSTM summary.
    refined = b.op(
        "Loop",
        [
            b.constant("refine_loop.trip_count", np.int64(LOOP_STEPS)),
            b.constant("refine_loop.keep_going", np.array(True)),
            last,
        ],
        "refine_loop",
        outputs=["refine_loop.final_state"],
        body=refine_loop_body("refine_loop.state_out", context=lstm_last),
    )[0]

    gemm_w = b.weight("head.fc.weight", (RNN_OUT, RNN_HIDDEN), fan_in=RNN_HIDDEN)
    b.op("Gemm", [refined, gemm_w, b.small("head.fc.bias", (RNN_OUT,))], "head.fc", outputs=["logits"], transB=1)
    b.add_output("logits", FLOAT, ["batch", RNN_OUT])
    return b.model(
        "Tiny recurrent model: LSTM -> GRU -> last step -> "
        f"Loop ({LOOP_STEPS} iterations, body reads an outer-scope "
        "tensor) -> Gemm."
    )


# --------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------

MODELS: dict[str, Callable[[np.random.Generator], onnx.ModelProto]] = {
    "tiny_resnet.onnx": build_tiny_resnet,
    "tiny_inception.onnx": build_tiny_inception,
    "mlp.onnx": build_mlp,
    "transformer_block.onnx": build_transformer_block,
    "tiny_rnn.onnx": build_tiny_rnn,
}


def main() -> None:
    for filename, build in MODELS.items():
        model = build(np.random.default_rng(SEED))
        path = OUTPUT_DIR / filename
        path.write_bytes(model.SerializeToString(deterministic=True))
        print(f"wrote {path} ({path.stat().st_size:,} bytes, {len(model.graph.node)} nodes)")


if __name__ == "__main__":
    main()
