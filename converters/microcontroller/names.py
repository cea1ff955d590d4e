"""Names that end up in generated C and C++ source.

A model name becomes part of file names (``kws_model_ops.h``), a namespace and symbols, so it
must be a plain identifier in both C and C++. We accept a deliberately narrow form that is
also a portable file name on every host: lowercase ASCII letters, digits and underscores.
"""

from __future__ import annotations

import re

from edgeserve.errors import InputError

_ALLOWED = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")

# Identifiers C or C++ give a meaning of their own; a generated symbol spelled like one would
# not compile (names are used bare by some generators, so suffixes cannot be relied on).
_KEYWORDS = frozenset("""
alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t
char32_t class compl concept const consteval constexpr constinit const_cast continue co_await
co_return co_yield decltype default delete do double dynamic_cast else enum explicit export
extern false float for friend goto if inline int long mutable namespace new noexcept not not_eq
nullptr operator or or_eq private protected public register reinterpret_cast requires restrict
return short signed sizeof static static_assert static_cast struct switch template this
thread_local throw true try typedef typeid typename union unsigned using virtual void volatile
wchar_t while xor xor_eq
""".split())


# Names the generated projects already use for files or symbols of their own: the program's
# main (main.c, main.cc), the C library headers they include (a model named stdint writes
# stdint.h beside main.c, which then includes it instead of the C library's), and the
# prefixes of edgeserve's kernels (es_conv.c, es_kernels.h) and of CMSIS-NN (arm_*): a model
# named like one built, said ok, and did not link.
_TAKEN_NAMES = frozenset("main assert ctype errno float limits math stdarg stdbool stddef stdint stdio stdlib "
                         "string".split())
_TAKEN_PREFIXES = ("es_", "arm_")


# The longest generated identifier is the name plus "_MODEL_TENSOR_ARENA_SIZE" (24 characters);
# C99 guarantees 63 significant characters for identifiers.
MAX_NAME = 63 - len("_MODEL_TENSOR_ARENA_SIZE")


def c_identifier(name: str) -> str:
    """Check that ``name`` can be used in generated C/C++ names, and return it.

    Accepted: lowercase ASCII letters, digits and underscores, not starting with a digit,
    without a double underscore (reserved for the C++ implementation) and not a keyword.
    Other modules call this on every name they put into C, so all of them reject the same
    names with the same message.

    Raises:
        InputError: ``name`` is not of that form; the message suggests a usable spelling.

    Example:
        >>> c_identifier("kws_ref")
        'kws_ref'
    """
    if not isinstance(name, str):
        raise InputError(f"a model name must be a string, got {type(name).__name__} {name!r}")
    problem = None
    bad = "".join(sorted({c for c in name if c not in _ALLOWED}))
    if not name:
        problem = "an empty name"
    elif bad:
        problem = f"the character(s) {bad!r}"
    elif name[0].isdigit():
        problem = "a leading digit"
    elif "__" in name:
        problem = "a double underscore, which C++ reserves"
    elif name.startswith("_"):
        # C reserves every identifier that starts with an underscore at file scope, where
        # the model's arrays and macros live.
        problem = "a leading underscore, which C reserves at file scope"
    elif name.endswith("_"):
        problem = f"a trailing underscore (the generated names add suffixes: {name}_model has '__')"
    elif len(name) > MAX_NAME:
        problem = f"{len(name)} characters (at most {MAX_NAME}, so that every generated name stays within " \
                  "the 63 significant characters C99 promises and file names stay short)"
    elif name in _KEYWORDS:
        problem = "a C/C++ keyword"
    elif name in _TAKEN_NAMES or name.startswith(_TAKEN_PREFIXES):
        problem = ("a name the generated project already uses (main, the C library's headers, and the es_ and "
                   "arm_ prefixes of the kernels)")
    if problem is None:
        return name
    raise InputError(f"model name {name!r} cannot be used in generated C/C++ code: expected "
                     "lowercase letters (a-z), digits and underscores, not starting with a digit,"
                     f" without '__' or a leading or trailing '_', at most {MAX_NAME} characters, not a "
                     f"C/C++ keyword and not a name the project uses itself; got {problem}. "
                     f"Try {_suggest(name)!r}.")


def untaken(name: str) -> str:
    """``name``, or a spelling close to it when it is a keyword or a name the generated project
    uses itself: ``main`` -> ``main_model``, ``es_conv`` -> ``m_es_conv``."""
    if name.startswith(_TAKEN_PREFIXES):
        return f"m_{name}"[:MAX_NAME].rstrip("_")
    if name in _KEYWORDS or name in _TAKEN_NAMES:
        return f"{name}_model"
    return name


def _suggest(name: str) -> str:
    """A usable spelling close to ``name`` (for the error message only)."""
    fixed = re.sub(r"_+", "_", re.sub(r"[^a-z0-9_]", "_", name.lower())).strip("_")[:MAX_NAME].rstrip("_")
    if not fixed or fixed[0].isdigit():
        fixed = f"model_{fixed}".rstrip("_")
    return untaken(fixed)
