"""Unit tests of FLOP and byte counting, one operator family at a time, against counts worked out by hand."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import onnx
import pytest
from onnx import helper

from pytest_dlbricks.core.graph import TensorSpec
from pytest_dlbricks.cut.flops import Cost, is_counted, node_cost, operator_cost

F = onnx.TensorProto.FLOAT
Shape = Sequence[int]


def spec(shape: Shape | None, dtype: int = F) -> TensorSpec | None:
    return None if shape is None else TensorSpec(dtype, tuple(shape))


def flops(
    op: str, inputs: Sequence[Shape | None], outputs: Sequence[Shape | None], domain: str = "", **attributes: Any
) -> int | None:
    return cost(op, inputs, outputs, domain, **attributes).flops


def cost(
    op: str, inputs: Sequence[Shape | None], outputs: Sequence[Shape | None], domain: str = "", **attributes: Any
) -> Cost:
    return operator_cost(op, domain, attributes, [spec(s) for s in inputs], [spec(s) for s in outputs])


# -- convolution ---------------------------------------------------------------------------------


def test_conv_counts_a_multiply_add_per_weight_and_output() -> None:
    # 16 x 8 x 8 outputs, each 3 channels x 3 x 3 kernel multiply-adds: 1024 * 27 * 2.
    assert flops("Conv", [[1, 3, 8, 8], [16, 3, 3, 3]], [[1, 16, 8, 8]]) == 55_296
    assert flops("Conv", [[1, 3, 8, 8], [16, 3, 3, 3], [16]], [[1, 16, 8, 8]]) == 55_296 + 1024


def test_grouped_and_depthwise_conv_see_only_their_group() -> None:
    # group 4: each output reads 8 / 4 = 2 channels; 8 x 4 x 4 = 128 outputs.
    assert flops("Conv", [[1, 8, 6, 6], [8, 2, 3, 3]], [[1, 8, 4, 4]], group=4) == 128 * 2 * 9 * 2
    assert flops("Conv", [[1, 8, 6, 6], [8, 1, 3, 3]], [[1, 8, 4, 4]], group=8) == 128 * 9 * 2


def test_conv_transpose_scatters_each_input_into_its_kernel() -> None:
    # 4 x 5 x 5 inputs, each multiplied into 2 output channels x 3 x 3 positions; bias on 2 x 7 x 7 outputs.
    assert flops("ConvTranspose", [[1, 4, 5, 5], [4, 2, 3, 3]], [[1, 2, 7, 7]]) == 100 * 18 * 2
    assert flops("ConvTranspose", [[1, 4, 5, 5], [4, 2, 3, 3], [2]], [[1, 2, 7, 7]]) == 3600 + 98


def test_bytes_are_every_input_and_output_once() -> None:
    assert cost("Conv", [[1, 3, 8, 8], [16, 3, 3, 3]], [[1, 16, 8, 8]]).bytes == (192 + 432 + 1024) * 4
    half = operator_cost("Relu", "", {}, [spec([10], onnx.TensorProto.FLOAT16)], [spec([10], onnx.TensorProto.FLOAT16)])
    assert half.bytes == 40


# -- matrix products -----------------------------------------------------------------------------


def test_gemm_with_and_without_bias_and_transposes() -> None:
    # M=4, N=16, K=8: 2 * 4 * 16 * 8, plus 64 bias adds.
    assert flops("Gemm", [[4, 8], [8, 16]], [[4, 16]]) == 1024
    assert flops("Gemm", [[4, 8], [8, 16], [16]], [[4, 16]]) == 1088
    assert flops("Gemm", [[8, 4], [16, 8], [16]], [[4, 16]], transA=1, transB=1) == 1088


def test_matmul_batched_broadcast_and_vector() -> None:
    # 2 x 3 x 4 x 6 outputs, K = 5.
    assert flops("MatMul", [[2, 3, 4, 5], [5, 6]], [[2, 3, 4, 6]]) == 144 * 5 * 2
    assert flops("MatMul", [[5], [5, 6]], [[6]]) == 60


@pytest.mark.parametrize(
    ("equation", "inputs", "output", "expected"),
    [
        ("bij,bjk->bik", [[2, 3, 4], [2, 4, 5]], [2, 3, 5], 2 * 2 * 3 * 4 * 5),
        ("ij,jk", [[3, 4], [4, 5]], [3, 5], 2 * 3 * 4 * 5),  # implicit output: j is summed
        ("...ij,...jk->...ik", [[2, 3, 4], [2, 4, 5]], [2, 3, 5], 240),
        ("ij->", [[3, 4]], [], 12),  # a sum: one add per element
        ("ij->ji", [[3, 4]], [4, 3], 0),  # a transpose: no arithmetic
        ("i,j->ij", [[3], [4]], [3, 4], 12),  # an outer product: one multiply, nothing summed
    ],
)
def test_einsum(equation: str, inputs: list[Shape], output: Shape, expected: int) -> None:
    assert flops("Einsum", inputs, [output], equation=equation.encode()) == expected


# -- pooling -------------------------------------------------------------------------------------


def test_pooling_counts_the_kernel_per_output() -> None:
    # 8 x 4 x 4 outputs, 3 x 3 window.
    assert flops("MaxPool", [[1, 8, 8, 8]], [[1, 8, 4, 4]], kernel_shape=[3, 3]) == 1152
    assert flops("AveragePool", [[1, 8, 8, 8]], [[1, 8, 4, 4]], kernel_shape=[3, 3]) == 1152
    assert flops("LpPool", [[1, 8, 8, 8]], [[1, 8, 4, 4]], kernel_shape=[3, 3]) == 2304
    assert flops("GlobalAveragePool", [[1, 8, 4, 4]], [[1, 8, 1, 1]]) == 128
    assert flops("GlobalMaxPool", [[1, 8, 4, 4]], [[1, 8, 1, 1]]) == 128
    assert flops("MaxPool", [[1, 8, 8, 8]], [[1, 8, 4, 4]]) is None, "no kernel_shape: not counted"


# -- normalisation -------------------------------------------------------------------------------


def test_normalizations_per_element() -> None:
    x = [1, 8, 4, 4]  # 128 elements
    assert flops("BatchNormalization", [x, [8], [8], [8], [8]], [x]) == 2 * 128
    assert flops("InstanceNormalization", [x, [8], [8]], [x]) == 7 * 128
    assert flops("GroupNormalization", [x, [8], [8]], [x], num_groups=2) == 7 * 128
    assert flops("LayerNormalization", [[2, 16], [16], [16]], [[2, 16]]) == 7 * 32
    assert flops("LayerNormalization", [[2, 16], [16]], [[2, 16]]) == 6 * 32
    assert flops("MeanVarianceNormalization", [x], [x]) == 5 * 128


def test_lrn_sums_squares_over_its_window() -> None:
    x = [1, 16, 4, 4]  # 256 elements, window of 5 channels
    assert flops("LRN", [x], [x], size=5) == (2 * 5 + 4) * 256


# -- elementwise, softmax, reductions ------------------------------------------------------------


def test_elementwise_counts_one_per_output_element() -> None:
    assert flops("Relu", [[2, 3]], [[2, 3]]) == 6
    assert flops("Add", [[2, 3], [3]], [[2, 3]]) == 6  # broadcast: counted on the output
    assert flops("Where", [[2, 3], [2, 3], [2, 3]], [[2, 3]]) == 6
    assert flops("Erf", [[5]], [[5]]) == 5


def test_variadic_ops_count_an_operation_per_extra_input() -> None:
    assert flops("Sum", [[4], [4], [4]], [[4]]) == 8
    assert flops("Max", [[4], [4]], [[4]]) == 4
    assert flops("Mean", [[4], [4], [4]], [[4]]) == 12  # two adds and a divide
    assert flops("Sum", [[4]], [[4]]) == 0


def test_softmax_and_reductions() -> None:
    assert flops("Softmax", [[2, 10]], [[2, 10]]) == 5 * 20
    assert flops("LogSoftmax", [[2, 10]], [[2, 10]]) == 5 * 20
    assert flops("ReduceSum", [[4, 5], [1]], [[4, 1]]) == 20
    assert flops("ReduceL2", [[4, 5]], [[4, 1]]) == 40
    assert flops("ArgMax", [[4, 5]], [[4, 1]]) == 20


def test_quantization_scales_and_shifts() -> None:
    assert flops("DequantizeLinear", [[10], [], []], [[10]]) == 20


def test_data_movement_does_no_arithmetic_and_views_move_no_bytes() -> None:
    assert cost("Reshape", [[2, 3, 4], [2]], [[6, 4]]) == Cost(flops=0, bytes=0), "a view of its input"
    assert cost("Squeeze", [[2, 1, 4]], [[2, 4]]) == Cost(flops=0, bytes=0)
    assert cost("Gather", [[5, 4], [2]], [[2, 4]]) == Cost(flops=0, bytes=(20 + 2 + 8) * 4)
    assert flops("Transpose", [[2, 3]], [[3, 2]]) == 0
    assert flops("Concat", [[2, 3], [2, 3]], [[4, 3]]) == 0
    assert flops("Dropout", [[2, 3]], [[2, 3]]) == 0


# -- attention -----------------------------------------------------------------------------------

# B=2, 4 heads, 8 queries, 10 keys, head size 16 for Q and K, 32 for V: 640 scores.
# Q K^T 2 * 640 * 16 = 20480, scale 640, softmax 5 * 640, P V 2 * 640 * 32 = 40960.
ATTENTION = 20_480 + 640 + 3_200 + 40_960


def test_onnx_attention_with_4d_and_3d_inputs() -> None:
    q, k, v = [2, 4, 8, 16], [2, 4, 10, 16], [2, 4, 10, 32]
    assert flops("Attention", [q, k, v], [[2, 4, 8, 32]]) == ATTENTION
    assert flops("Attention", [q, k, v, [8, 10]], [[2, 4, 8, 32]]) == ATTENTION + 640, "mask add"
    three_d = ([2, 8, 64], [2, 10, 64], [2, 10, 128])
    assert flops("Attention", list(three_d), [[2, 8, 128]], q_num_heads=4, kv_num_heads=4) == ATTENTION


def test_multi_head_attention_of_the_microsoft_domain() -> None:
    q, k, v = [2, 8, 64], [2, 10, 64], [2, 10, 128]
    assert flops("MultiHeadAttention", [q, k, v], [[2, 8, 128]], "com.microsoft", num_heads=4) == ATTENTION
    # A bias added to the projected Q (2 x 8 x 64), K (2 x 10 x 64) and V (2 x 10 x 128).
    biased = flops("MultiHeadAttention", [q, k, v, [256]], [[2, 8, 128]], "com.microsoft", num_heads=4)
    assert biased == ATTENTION + 1024 + 1280 + 2560
    assert flops("MultiHeadAttention", [q, k, v], [[2, 8, 128]], "com.microsoft") is None, "heads unknown"


def test_fused_attention_of_the_microsoft_domain_counts_its_projection() -> None:
    # Input 2 x 8 x 32 projected to 3 x 64: 2 * 16 * 32 * 192 + bias 16 * 192; then 4 heads of 16 over 8 x 8.
    projection = 2 * 16 * 32 * 192 + 16 * 192
    scores = 2 * 4 * 8 * 8
    core = 2 * scores * 16 + scores * 6 + 2 * scores * 16
    assert flops("Attention", [[2, 8, 32], [32, 192], [192]], [[2, 8, 64]], "com.microsoft", num_heads=4) == (
        projection + core
    )


# -- recurrent -----------------------------------------------------------------------------------


def test_lstm_gru_rnn_count_their_products_gates_and_state() -> None:
    # 5 steps, batch 2, input 8, hidden 4.
    x = [5, 2, 8]
    lstm = 2 * 4 * 4 * (8 + 4) + 2 * 4 * 4 + 5 * 4 + 2 * 4 * 4  # products, sum + activation, state, bias
    assert flops("LSTM", [x, [1, 16, 8], [1, 16, 4], [1, 32]], [None]) == 10 * lstm
    gru = 2 * 3 * 4 * 12 + 2 * 3 * 4 + 5 * 4  # bidirectional, no bias
    assert flops("GRU", [x, [2, 12, 8], [2, 12, 4]], [None]) == 20 * gru
    rnn = 2 * 4 * 12 + 2 * 4
    assert flops("RNN", [[2, 5, 8], [1, 4, 8], [1, 4, 4]], [None], layout=1) == 10 * rnn


# -- unknown -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("op", "domain"), [("Loop", ""), ("If", ""), ("Resize", ""), ("TopK", ""), ("QOrderedMatMul", "com.microsoft")]
)
def test_operators_not_counted_are_unknown_not_zero(op: str, domain: str) -> None:
    result = cost(op, [[2, 3]], [[2, 3]], domain)
    assert result.flops is None
    assert result.bytes == 48
    assert not is_counted(op, domain)


def test_a_missing_shape_makes_the_count_unknown() -> None:
    assert flops("Conv", [[1, 3, 8, 8], [16, 3, 3, 3]], [None]) is None
    assert flops("MatMul", [None, [5, 6]], [[4, 6]]) is None
    assert flops("Relu", [[2, 3]], [None]) is None


def test_node_cost_reads_attributes_and_specs_by_name() -> None:
    node = helper.make_node(
        "Gemm",
        [
            "a",
            "b",
            "",
        ],
        ["y"],
        transA=1,
    )
    specs = {"a": TensorSpec(F, (8, 4)), "b": TensorSpec(F, (8, 16)), "y": TensorSpec(F, (4, 16))}
    assert node_cost(node, specs) == Cost(flops=2 * 4 * 16 * 8, bytes=(32 + 128 + 64) * 4)
    einsum = helper.make_node("Einsum", ["a", "b"], ["y"], equation="ji,jk->ik")
    assert node_cost(einsum, specs).flops == 2 * 4 * 8 * 16
    assert node_cost(helper.make_node("Relu", ["a"], ["unknown"]), specs).flops is None


# -- onnxruntime's fused and layout operators (the graph it runs) --------------------------------

MS = "com.microsoft"
NCHWC = "com.microsoft.nchwc"


@pytest.mark.parametrize("domain", [MS, NCHWC])
def test_fused_conv_counts_the_conv_its_activation_and_its_residual_add(domain: str) -> None:
    # The Conv above (55,296 + 1,024 bias adds), then 1,024 activations, then 1,024 adds of a 4th input.
    conv = [[1, 3, 8, 8], [16, 3, 3, 3], [16]]
    out = [[1, 16, 8, 8]]
    assert flops("Conv" if domain == NCHWC else "FusedConv", conv, out, domain) == 56_320
    name = "Conv" if domain == NCHWC else "FusedConv"
    assert flops(name, conv, out, domain, activation=b"Relu") == 57_344
    assert flops(name, [*conv, [1, 16, 8, 8]], out, domain, activation=b"Relu") == 58_368


def test_fused_gemm_and_matmul() -> None:
    assert flops("FusedGemm", [[4, 8], [8, 16], [16]], [[4, 16]], MS, activation=b"Relu") == 1088 + 64
    assert flops("FusedMatMul", [[4, 8], [8, 16]], [[4, 16]], MS) == 1024
    assert flops("FusedMatMul", [[8, 4], [16, 8]], [[4, 16]], MS, transA=1, transB=1) == 1024
    assert flops("FusedMatMul", [[4, 8], [8, 16]], [[4, 16]], MS, alpha=0.5) == 1024 + 64, "the scaling"
    assert flops("FusedMatMul", [[4, 8], [8, 16]], [[4, 16]], MS, transBatchA=1) is None


def test_gelu_family_counts_the_pattern_it_replaces() -> None:
    x = [[2, 3]]
    assert flops("Gelu", x, x) == flops("Gelu", x, x, MS) == 5 * 6
    assert flops("BiasGelu", [[2, 3], [3]], x, MS) == 6 * 6
    assert flops("FastGelu", [[2, 3]], x, MS) == 9 * 6
    assert flops("FastGelu", [[2, 3], [3]], x, MS) == 10 * 6
    assert flops("QuickGelu", x, x, MS) == 3 * 6


def test_fused_normalizations_and_softmax() -> None:
    x, g = [2, 16], [16]  # 32 elements
    assert flops("SkipLayerNormalization", [x, x, g, g], [x], MS) == (1 + 7) * 32
    assert flops("SkipLayerNormalization", [x, x, g, g, g], [x], MS) == (1 + 7 + 1) * 32
    assert flops("SkipSimplifiedLayerNormalization", [x, x, g], [x], MS) == (1 + 4) * 32
    assert flops("SimplifiedLayerNormalization", [x, g], [x], MS) == 4 * 32
    assert flops("BiasSoftmax", [x, x], [x], MS) == 6 * 32


def test_nchwc_pooling_and_reorders() -> None:
    assert flops("MaxPool", [[1, 16, 8, 8]], [[1, 16, 4, 4]], NCHWC, kernel_shape=[2, 2]) == 256 * 4
    assert flops("GlobalAveragePool", [[1, 16, 4, 4]], [[1, 16, 1, 1]], NCHWC) == 256
    assert cost("ReorderInput", [[1, 3, 8, 8]], [[1, 16, 8, 8]], NCHWC) == Cost(0, (192 + 1024) * 4)
    assert flops("Upsample", [[1, 16, 4, 4]], [[1, 16, 8, 8]], NCHWC) is None
