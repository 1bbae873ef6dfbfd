"""Root conftest: the project's tests drive the plugin end to end through pytest's ``pytester``."""

pytest_plugins = ("pytester",)
