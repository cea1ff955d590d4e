"""litert-torch's lowering of a torch program to a float .tflite, in a child process.

litert-torch runs torch.export, an MLIR lowering and the LiteRT converter, all native code
meeting a graph nobody has lowered before (a PyTorch source's, or the ONNX reader's). A crash
there used to take the user's process with it; here it costs a child (edgeserve.isolation)
and becomes one error line naming litert-torch. The program crosses as a .pt2 file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgeserve._deps import TORCH_TRACING, require
from edgeserve.console import quiet_libraries
from edgeserve.errors import EdgeServeError, SourceModelError, first_line


def lower_to_tflite(program: Any, example: tuple[Any, ...], workdir: Path) -> bytes:
    """The float .tflite of ``program`` run on tensors shaped like ``example``; an EdgeServeError
    (a crash included) carries litert-torch's own first line."""
    from edgeserve.isolation import run_isolated

    torch = require("torch", "lowering a torch program to LiteRT")
    workdir.mkdir(parents=True, exist_ok=True)
    saved = workdir / "for_litert_torch.pt2"
    with TORCH_TRACING:
        torch.export.save(program, str(saved))
    shapes = [(tuple(int(d) for d in t.shape), str(t.dtype).removeprefix("torch.")) for t in example]
    return run_isolated(f"{__name__}:lower_step", str(saved), shapes, tool="litert-torch",
                        what="lowering the torch program to a float .tflite")


def lower_step(saved: str, shapes: list[tuple[tuple[int, ...], str]]) -> bytes:
    torch = require("torch", "lowering a torch program to LiteRT")
    litert_torch = require("litert_torch", "lowering a torch program to LiteRT")
    program = torch.export.load(saved)
    example = tuple(torch.zeros(shape, dtype=getattr(torch, dtype)) for shape, dtype in shapes)
    try:
        with quiet_libraries():
            return bytes(litert_torch.convert(program.module(), example).model_content())
    except EdgeServeError:
        raise
    except Exception as exc:  # litert-torch raises from torch.export, MLIR lowering and the LiteRT converter
        raise SourceModelError(first_line(exc)) from exc
