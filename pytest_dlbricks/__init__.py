"""pytest-dlbricks: benchmark the distinct layer sequences of ONNX models and compose model latency.

PYTEST_DONT_REWRITE: the package holds no test assertions, and pytester runs import it twice.
"""

__version__ = "0.1.0"
