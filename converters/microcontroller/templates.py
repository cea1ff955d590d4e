"""The C, C++ and CMake text the microcontroller targets write, kept as files under
firmware/templates/ (installed as edgeserve._firmware) rather than in Python strings: each a
string.Template ($name, ${name}, $$ for a dollar), read by this one helper."""

from __future__ import annotations

from functools import cache
from importlib import resources
from string import Template


@cache
def template(path: str) -> Template:
    """firmware/templates/<path> ("tflm/main.cc.in") as a Template."""
    folder = resources.files("edgeserve._firmware").joinpath("templates")
    return Template(folder.joinpath(*path.split("/")).read_text(encoding="utf-8"))


def text(path: str) -> str:
    """firmware/templates/<path> as it is (a part with no placeholders)."""
    return template(path).template
