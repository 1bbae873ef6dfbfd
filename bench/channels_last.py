"""Write the two networks that docs/validation.rst measures layout churn on ("Where the estimates fall short").

A MobileNetV2 written as channels-last exporters write it: every convolution between a Transpose to NCHW and
one back, batch norm as Sub, Mul and Add over the last axis, ReLU6 as Clip, zero padding before the strided
depthwise convolutions, and float-to-float Casts around them (``mobilenet_v2_channels_last.onnx``); and the
same network as channels-first exporters write it, batch norms folded into the convolutions, with no
Transpose but the input's and no Cast (``mobilenet_v2_folded.onnx``). Weights are random, from a fixed seed.
Then time both as a user would, side by side::

    python bench/channels_last.py OUT [--size 224]
    pytest -p no:cacheprovider --dlbricks-granularity=2 --dlbricks-validate --dlbricks-store=none OUT
    python bench/breakdown.py OUT/mobilenet_v2_channels_last.onnx OUT/mobilenet_v2_folded.onnx
    python bench/simulated.py --runs 1 --models none --zoo OUT     # written with --size 64: minutes, not hours
"""

from __future__ import annotations

import argparse
import collections
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

#: MobileNetV2's inverted residual stages: expansion, output channels, blocks, first block's stride.
STAGES = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


class Network:
    """One MobileNetV2 graph being written, channels-last (Transposes, Casts, batch norm as Sub/Mul/Add) or
    ``folded`` (channels-first, batch norms folded into the convolutions)."""

    def __init__(self, folded: bool) -> None:
        self.folded = folded
        self.nodes: list[onnx.NodeProto] = []
        self.weights: list[onnx.TensorProto] = []
        self.rng = np.random.default_rng(0)

    def _name(self, prefix: str) -> str:
        return f"{prefix}_{len(self.nodes) + len(self.weights)}"

    def weight(self, values: object, dtype: type = np.float32) -> str:
        name = self._name("w")
        self.weights.append(numpy_helper.from_array(np.asarray(values).astype(dtype), name))
        return name

    def node(self, op: str, inputs: list[str], **attributes: object) -> str:
        output = self._name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [output], name=output, **attributes))
        return output

    def cast(self, x: str) -> str:
        """A Cast from float to float, as some exporters write around every layer."""
        return x if self.folded else self.node("Cast", [x], to=TensorProto.FLOAT)

    def conv(self, x: str, cin: int, cout: int, kernel: int, stride: int, group: int = 1, pad: bool = True) -> str:
        scale = (2 / (cin // group * kernel * kernel)) ** 0.5
        weight = self.weight(self.rng.standard_normal((cout, cin // group, kernel, kernel)) * scale)
        attributes = {"kernel_shape": [kernel] * 2, "strides": [stride] * 2, "group": group}
        attributes["pads"] = [kernel // 2 if pad else 0] * 4
        if self.folded:
            return self.node("Conv", [x, weight, self.weight(self.rng.standard_normal(cout) * 0.1)], **attributes)
        nchw = self.cast(self.node("Transpose", [x], perm=[0, 3, 1, 2]))
        out = self.cast(self.node("Conv", [nchw, weight], **attributes))
        return self.cast(self.node("Transpose", [out], perm=[0, 2, 3, 1]))

    def batch_norm(self, x: str, channels: int) -> str:
        if self.folded:
            return x
        y = self.cast(self.node("Sub", [x, self.weight(self.rng.standard_normal(channels) * 0.1)]))
        y = self.cast(self.node("Mul", [y, self.weight(0.5 + self.rng.random(channels))]))
        return self.node("Add", [y, self.weight(self.rng.standard_normal(channels) * 0.1)])

    def relu6(self, x: str) -> str:
        return self.cast(self.node("Clip", [x, self.weight(0.0), self.weight(6.0)]))

    def zero_pad(self, x: str) -> str:
        """One row and column of zeros after the spatial axes, before a strided convolution."""
        pads = [0, 0, 0, 0, 0, 0, 1, 1] if self.folded else [0, 0, 0, 0, 0, 1, 1, 0]
        return self.node("Pad", [x, self.weight(pads, np.int64)])

    def block(self, x: str, cin: int, cout: int, expansion: int, stride: int) -> str:
        hidden = cin * expansion
        y = x
        if expansion != 1:
            y = self.relu6(self.batch_norm(self.conv(y, cin, hidden, 1, 1), hidden))
        if stride == 2:
            y = self.conv(self.zero_pad(y), hidden, hidden, 3, 2, group=hidden, pad=False)
        else:
            y = self.conv(y, hidden, hidden, 3, 1, group=hidden)
        y = self.batch_norm(self.conv(self.relu6(self.batch_norm(y, hidden)), hidden, cout, 1, 1), cout)
        return self.node("Add", [x, y]) if stride == 1 and cin == cout else y

    def model(self, size: int) -> onnx.ModelProto:
        x = self.node("Transpose", ["input"], perm=[0, 3, 1, 2]) if self.folded else "input"
        x = self.relu6(self.batch_norm(self.conv(self.zero_pad(x), 3, 32, 3, 2, pad=False), 32))
        cin = 32
        for expansion, cout, blocks, stride in STAGES:
            for index in range(blocks):
                x, cin = self.block(x, cin, cout, expansion, stride if index == 0 else 1), cout
        x = self.relu6(self.batch_norm(self.conv(x, cin, 1280, 1, 1), 1280))
        axes = [2, 3] if self.folded else [1, 2]
        x = self.node("ReduceMean", [x, self.weight(axes, np.int64)], keepdims=0)
        classes = self.weight(self.rng.standard_normal((1280, 1000)) * 0.03)
        x = self.node("Gemm", [x, classes, self.weight(np.zeros(1000))])
        graph = helper.make_graph(
            self.nodes,
            "mobilenet_v2",
            [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, size, size, 3])],
            [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 1000])],
            self.weights,
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
        onnx.checker.check_model(model, full_check=True)
        return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder to write both networks in")
    parser.add_argument("--size", type=int, default=224, help="input height and width (default: %(default)s)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name, folded in (("mobilenet_v2_channels_last", False), ("mobilenet_v2_folded", True)):
        model = Network(folded).model(args.size)
        onnx.save(model, args.out / f"{name}.onnx")
        ops = collections.Counter(node.op_type for node in model.graph.node)
        print(f"{name}.onnx: {len(model.graph.node)} nodes, {ops['Transpose']} Transposes, {ops['Cast']} Casts")


if __name__ == "__main__":
    main()
