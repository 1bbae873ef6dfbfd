"""How counts read in the text the plugin prints: "1 model", "2 models"."""

from __future__ import annotations


def plural(count: int, noun: str, plural_form: str | None = None) -> str:
    """``count`` and ``noun``, in the plural unless the count is one (``plural_form`` when it is not ``noun + s``)."""
    return f"{count} {noun if count == 1 else plural_form or noun + 's'}"


#: Plurals that do not end in a plain "s".
_SINGULAR = {"shelves": "shelf"}


def counted(count: int, plural_noun: str) -> str:
    """``count`` and a noun given in the plural (a key of a count), in the singular for one: "1 shelf"."""
    if count != 1:
        return f"{count} {plural_noun}"
    return f"1 {_SINGULAR.get(plural_noun) or plural_noun.removesuffix('s')}"
