"""pytest-dlbricks: benchmark the distinct layer sequences of ONNX models and compose model latency."""

__version__ = "0.1.0"
