"""FLOP counters of attention, the recurrent operators and onnxruntime's fused and contrib operators
(com.microsoft, NCHWc)."""

from __future__ import annotations

from .counters import FlopCounter, _conv, _gemm, _need, _Op, _Unknown

# -- attention -----------------------------------------------------------------------------------


def _attention_core(batch_heads: int, q_len: int, kv_len: int, qk_dim: int, v_dim: int, *, masked: bool) -> int:
    """Scores ``Q K^T`` (2 per multiply-add), scale, mask add, softmax (5 per score), ``P V``."""
    scores = batch_heads * q_len * kv_len
    return 2 * scores * qk_dim + scores * (1 + (1 if masked else 0) + 5) + 2 * scores * v_dim


def _heads(op: _Op, name: str) -> int:
    heads = int(op.attributes.get(name, 0))
    if heads < 1:
        raise _Unknown
    return heads


def _onnx_attention(op: _Op) -> int:
    """ai.onnx Attention (opset 23): Q, K, V as ``[B, heads, S, D]`` or ``[B, S, heads * D]``."""
    q, k, v = (_need(op.input(i)) for i in range(3))
    if len(q.shape) == 4 and len(k.shape) == 4 and len(v.shape) == 4:
        batch, heads, q_len, qk_dim = q.shape
        kv_len, v_dim = k.shape[2], v.shape[3]
    elif len(q.shape) == 3 and len(k.shape) == 3 and len(v.shape) == 3:
        heads = _heads(op, "q_num_heads")
        kv_heads = _heads(op, "kv_num_heads")
        batch, q_len, hidden = q.shape
        qk_dim, kv_len, v_dim = hidden // heads, k.shape[1], v.shape[2] // kv_heads
    else:
        raise _Unknown
    past = op.input(4)
    if past is not None and len(past.shape) == 4:
        kv_len += past.shape[2]
    return _attention_core(batch * heads, q_len, kv_len, qk_dim, v_dim, masked=op.has_input(3))


def _multi_head_attention(op: _Op) -> int:
    """com.microsoft MultiHeadAttention with separate ``[B, S, hidden]`` query, key and value; the bias,
    when given, is added to all three."""
    q, k, v = (_need(op.input(i)) for i in range(3))
    if not (len(q.shape) == len(k.shape) == len(v.shape) == 3):
        raise _Unknown
    heads = _heads(op, "num_heads")
    batch, q_len, hidden = q.shape
    kv_len = k.shape[1]
    bias = batch * (q_len * hidden + kv_len * (k.shape[2] + v.shape[2])) if op.has_input(3) else 0
    masked = op.has_input(4) or op.has_input(5)
    return bias + _attention_core(batch * heads, q_len, kv_len, hidden // heads, v.shape[2] // heads, masked=masked)


def _fused_attention(op: _Op) -> int:
    """com.microsoft Attention: input ``[B, S, in]`` projected by weights ``[in, q + k + v hidden]``."""
    x, weight = _need(op.input(0)), _need(op.input(1))
    if len(x.shape) != 3 or len(weight.shape) != 2:
        raise _Unknown
    heads = _heads(op, "num_heads")
    batch, length, width = x.shape
    projected = weight.shape[1]
    sizes = op.attributes.get("qkv_hidden_sizes") or [projected // 3] * 3
    qk_hidden, v_hidden = int(sizes[0]), int(sizes[2])
    projection = 2 * batch * length * width * projected + (batch * length * projected if op.has_input(2) else 0)
    kv_len = length
    past = op.input(4)
    if past is not None and len(past.shape) == 5:
        kv_len += past.shape[3]
    core = _attention_core(batch * heads, length, kv_len, qk_hidden // heads, v_hidden // heads, masked=op.has_input(3))
    return projection + core


# -- recurrent -----------------------------------------------------------------------------------

_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
#: Per hidden unit and step: LSTM's ``c = f*c + i*g`` and ``h = o*tanh(c)``; GRU's reset and update.
_STATE_UPDATE = {"RNN": 0, "GRU": 5, "LSTM": 5}


def _recurrent(op_type: str) -> FlopCounter:
    gates = _GATES[op_type]

    def count(op: _Op) -> int:
        """Per step, batch row and direction: input and recurrent products (``2*g*H*(I+H)``), their sum,
        an activation per gate element, the biases when given, the state update, and LSTM peepholes."""
        x, weight = _need(op.input(0)), _need(op.input(1))
        if len(x.shape) != 3 or len(weight.shape) != 3:
            raise _Unknown
        directions, gate_rows, width = weight.shape
        hidden = gate_rows // gates
        steps, batch = (x.shape[1], x.shape[0]) if op.attributes.get("layout", 0) else (x.shape[0], x.shape[1])
        per_step = 2 * gates * hidden * (width + hidden) + 2 * gates * hidden + _STATE_UPDATE[op_type] * hidden
        if op.has_input(3):
            per_step += 2 * gates * hidden
        if op_type == "LSTM" and op.has_input(7):
            per_step += 6 * hidden
        return steps * batch * directions * per_step

    count.__doc__ = f"{op_type}: {gates} gate(s); " + (count.__doc__ or "")
    return count


# -- onnxruntime's own operators ----------------------------------------------------------------
# What onnxruntime's graph optimizations put in the graph it runs (the default cut): fused
# operators of the com.microsoft domain and the NCHWc layout operators of its CPU provider.
# Fused work is counted as the operators it replaces, so both cuts count a model alike, except
# the work the optimizations remove (a BatchNormalization folded into a Conv's weights).

#: Domain of onnxruntime's CPU layout-blocked (NCHWc) operators.
NCHWC = "com.microsoft.nchwc"
MICROSOFT = "com.microsoft"
#: Per element: x / sqrt(2), erf, + 1, * x, * 0.5, as the pattern onnxruntime fuses into Gelu.
GELU_FLOPS = 5
#: Per element, the tanh approximation: x^3 (2), * 0.044715, + x, * sqrt(2/pi), tanh, + 1, * x * 0.5 (2).
FAST_GELU_FLOPS = 9


def _fused_activation(op: _Op) -> int:
    """One FLOP per output element for an activation fused in with an ``activation`` attribute."""
    return _need(op.output(0)).numel if op.attributes.get("activation") else 0


def _fused_conv(op: _Op) -> int:
    """Conv, plus its fused activation, plus the fused residual add of a 4th input (``Z`` or ``Sum``)."""
    extra = _need(op.output(0)).numel if op.has_input(3) else 0
    return _conv(op) + _fused_activation(op) + extra


def _fused_gemm(op: _Op) -> int:
    return _gemm(op) + _fused_activation(op)


def _fused_matmul(op: _Op) -> int:
    """MatMul with transposes folded in, and its ``alpha`` scaling when not 1."""
    if op.attributes.get("transBatchA", 0) or op.attributes.get("transBatchB", 0):
        raise _Unknown
    first = _need(op.input(0))
    if len(first.shape) < 2:
        raise _Unknown
    shared = first.shape[-2] if op.attributes.get("transA", 0) else first.shape[-1]
    out = _need(op.output(0)).numel
    return 2 * out * shared + (out if float(op.attributes.get("alpha", 1.0)) != 1.0 else 0)


def _per_output_element(flops: int, *, bias: int | None = None) -> FlopCounter:
    """``flops`` per output element, one more when input ``bias`` is given."""

    def count(op: _Op) -> int:
        extra = 1 if bias is not None and op.has_input(bias) else 0
        return (flops + extra) * _need(op.output(0)).numel

    return count


def _skip_layer_normalization(simplified: bool) -> FlopCounter:
    """Add the skip input (and a bias when given), then normalize: 1 + 7 per element, 1 + 4 simplified."""

    def count(op: _Op) -> int:
        bias_index = 3 if simplified else 4
        per_element = 1 + (4 if simplified else 7) + (1 if op.has_input(bias_index) else 0)
        return per_element * _need(op.input(0)).numel

    return count
