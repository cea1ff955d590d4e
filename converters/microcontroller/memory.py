"""Flash and RAM a TFLM build needs, and whether that fits a device profile.

Flash = the model's bytes (the C array is const, so it stays in flash) + the code of the
interpreter core + the code of each operator's kernel (figures and their source in
``ops.py``). RAM = the tensor arena + a stack estimate + the interpreter's own objects
(the op resolver and MicroInterpreter, usually static). Each figure is labelled in the
report as computed, measured elsewhere or estimated.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from edgeserve.errors import DoesNotFitError, InputError
from edgeserve.converters.microcontroller.arena import PlannedBuffer

# Stack depth of TFLM's Invoke with reference kernels on Cortex-M: the deepest paths
# (conv → per-channel requantize) keep a few hundred bytes of locals per frame, about
# 10 frames deep. 4 KB is an estimate with margin, the figure TFLM's own examples leave
# for the main stack; measure with -fstack-usage or stack painting on the board.
STACK_ESTIMATE_BYTES = 4096
# MicroMutableOpResolver<N> keeps, per slot on a 32-bit target, a TFLMRegistration (five
# function pointers, a builtin code and a name pointer: 28 bytes), the builtin code (4)
# and its parser function pointer (4) (micro_mutable_op_resolver.h, micro_common.h).
RESOLVER_BYTES_PER_OP = 36
# A MicroInterpreter object on a 32-bit target (its allocator, context, graph and
# bookkeeping pointers), an estimate from its members.
INTERPRETER_OBJECT_BYTES = 256


@dataclasses.dataclass(frozen=True)
class MemoryReport:
    flash: dict[str, int]
    ram: dict[str, int]
    flash_available: int | None
    ram_available: int | None
    profile: str | None
    # The profile's RAM regions, fastest first, as (name, bytes, note): the arena, stack and
    # objects go to the fastest one that holds them all, as mcu-c places its arena, so both
    # microcontroller targets read the same regions (an ESP32-S3's 320 KB of internal SRAM
    # left by ESP-IDF, then its 8 MB of PSRAM). A profile without regions has one: all its RAM.
    regions: tuple[tuple[str, int, str], ...] = ()

    @property
    def flash_needed(self) -> int:
        return sum(self.flash.values())

    @property
    def ram_needed(self) -> int:
        return sum(self.ram.values())

    @property
    def fits_flash(self) -> bool | None:
        return None if self.flash_available is None else self.flash_needed <= self.flash_available

    @property
    def ram_region(self) -> tuple[str, int, str] | None:
        """The fastest region that holds the RAM this build needs, or None."""
        return next((r for r in self.regions if r[1] >= self.ram_needed), None)

    @property
    def fits_ram(self) -> bool | None:
        if self.ram_available is None:
            return None
        if self.regions:
            return self.ram_region is not None
        return self.ram_needed <= self.ram_available

    def fits(self) -> dict[str, Any]:
        return {"flash": self.fits_flash, "ram": self.fits_ram, "profile": self.profile}

    def to_dict(self) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "flash": {"needed": self.flash_needed, "available": self.flash_available, "terms": dict(self.flash)},
            "ram": {"needed": self.ram_needed, "available": self.ram_available, "terms": dict(self.ram)},
            "regions": [{"name": name, "bytes": size, "note": note} for name, size, note in self.regions],
            "arena_region": self.ram_region[0] if self.ram_region else None,
            "estimates": {
                "stack": f"{STACK_ESTIMATE_BYTES} bytes, an estimate for TFLM reference kernels on Cortex-M",
                "runtime_objects": "op resolver and MicroInterpreter objects on a 32-bit target, from their members",
                "code": "per-operator kernel code size, see converters/microcontroller/ops.py for the method",
            },
        }


def mcu_profile_limits(profile: Any) -> tuple[int | None, int | None, str | None]:
    """(flash, ram, name) of an ``mcu`` profile; (None, None, None) without a profile."""
    if profile is None:
        return None, None, None
    if profile.kind != "mcu":
        raise InputError(
            f"profile {profile.name} is a {profile.kind} device; the mcu target needs a "
            "microcontroller profile (see `edgeserve profiles`), e.g. stm32f746-discovery"
        )
    return profile.memory.flash_bytes, profile.memory.ram_bytes, profile.name


def memory_report(
    *, model_bytes: int, core_code_bytes: int, op_code_bytes: int, op_count: int, arena_bytes: int,
    profile: Any,
) -> MemoryReport:
    flash_available, ram_available, name = mcu_profile_limits(profile)
    return MemoryReport(
        flash={"model": model_bytes, "interpreter_code": core_code_bytes, "kernel_code": op_code_bytes},
        ram={
            "tensor_arena": arena_bytes,
            "stack_estimate": STACK_ESTIMATE_BYTES,
            "runtime_objects": INTERPRETER_OBJECT_BYTES + RESOLVER_BYTES_PER_OP * op_count,
        },
        flash_available=flash_available,
        ram_available=ram_available,
        regions=tuple((r.name, r.bytes, r.note) for r in profile.memory.regions()) if name is not None else (),
        profile=name,
    )


def check_fit(report: MemoryReport, largest: Sequence[PlannedBuffer]) -> None:
    """Raise :class:`DoesNotFitError` when flash or RAM is over the profile's budget."""
    problems, remedies = [], []
    if report.fits_flash is False:
        assert report.flash_available is not None
        terms = ", ".join(f"{k.replace('_', ' ')} {v:,}" for k, v in report.flash.items())
        problems.append(
            f"flash needs {report.flash_needed:,} bytes but {report.profile} has {report.flash_available:,} ({terms})"
        )
        remedies.append(
            "shrink the weights (fewer filters or a smaller width multiplier, pruning) or place the "
            "model array in external flash"
        )
    if report.fits_ram is False:
        assert report.ram_available is not None
        terms = ", ".join(f"{k.replace('_', ' ')} {v:,}" for k, v in report.ram.items())
        if len(report.regions) > 1:
            name, size, _ = max(report.regions, key=lambda r: r[1])
            problems.append(f"RAM needs {report.ram_needed:,} bytes but the largest RAM region of {report.profile} "
                            f"({name}) has {size:,} ({terms})")
        else:
            available = report.regions[0][1] if report.regions else report.ram_available
            problems.append(f"RAM needs {report.ram_needed:,} bytes but {report.profile} has {available:,} ({terms})")
        tensors = "; ".join(f"{b.name or f'tensor {b.tensor}'} {b.size:,} B" for b in largest)
        problems.append(f"largest activation buffers: {tensors}")
        remedies.append(
            "lower the input resolution or the channels of the early layers (they own the "
            "largest activations), or put the arena in external RAM"
        )
    if problems:
        raise DoesNotFitError(
            "the mcu build does not fit: " + "; ".join(problems) + ". What would help: " + "; ".join(remedies)
            + ". Pass --no-fit-check to write it anyway.",
            report.to_dict(),
        )
