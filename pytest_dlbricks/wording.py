"""How counts read in the text the plugin prints: "1 model", "2 models"."""

from __future__ import annotations


def plural(count: int, noun: str, plural_form: str | None = None) -> str:
    """``count`` and ``noun``, in the plural unless the count is one (``plural_form`` when it is not ``noun + s``)."""
    return f"{count} {noun if count == 1 else plural_form or noun + 's'}"
