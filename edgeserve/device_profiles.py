"""Device profiles: what a target device is, and how edgeserve should run a model on it.

One TOML file per device lives in the ``profiles/`` folder, installed as the package
data of ``edgeserve._profiles``. A profile names the CPU, the memory budget, the
accelerators, the backend chain the runtime tries in order, which quantization modes
that runtime can execute, and where the power and temperature meters read from.

Every file is validated strictly, because a typo in a profile otherwise surfaces much
later as a silently wrong fit check or an energy meter that reads nothing. Unknown keys,
missing keys, wrong types and impossible values raise :class:`~edgeserve.errors.ProfileError`
naming the file and the key.

Example:
    >>> from edgeserve.device_profiles import load_profile
    >>> pi = load_profile("raspberry-pi-5")
    >>> pi.runtime.backends[0]
    'litert:xnnpack'
    >>> load_profile("./my-board.toml")  # a user's own profile file  # doctest: +SKIP
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 uses the backport declared in pyproject.toml
    import tomli as tomllib

from edgeserve.atomic import read_settings
from edgeserve.errors import ProfileError, did_you_mean

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

__all__ = [
    "ACCELERATOR_KINDS",
    "ARCHITECTURES",
    "KINDS",
    "KNOWN_BACKENDS",
    "ORT_BACKEND_PROVIDERS",
    "POWER_SOURCES",
    "Accelerator",
    "CpuSpec",
    "MemorySpec",
    "PowerSpec",
    "Profile",
    "QuantizationSpec",
    "RuntimeSpec",
    "ThermalSpec",
    "list_profiles",
    "load_profile",
    "profile_dir",
]

#: Device classes. ``mcu`` profiles need ``flash_bytes``; the others must not have it.
KINDS: tuple[str, ...] = ("linux", "mobile", "mcu")

#: Kinds of ``[[accelerators]]`` entries.
ACCELERATOR_KINDS: tuple[str, ...] = ("npu", "gpu", "dsp")

#: Instruction-set names accepted in ``[cpu] arch``.
ARCHITECTURES: tuple[str, ...] = (
    "aarch64",
    "x86_64",
    "armv7l",
    "armv6-m",
    "armv7-m",
    "armv7e-m",
    "armv8-m.main",
    "armv8.1-m.main",
    "xtensa",
    "riscv32",
    "riscv64",
)

#: ``<engine>:<backend>`` names a profile may list in ``[runtime] backends``.
#: litert: ``npu`` = the external delegate named by the profile's npu accelerator ``library``.
#: coreml: ``ane`` = CPU_AND_NE compute units, ``gpu`` = CPU_AND_GPU, ``cpu`` = CPU_ONLY.
#: tflm: ``cmsis-nn`` (Arm Cortex-M), ``esp-nn`` (Espressif), ``reference`` (portable C++).
KNOWN_BACKENDS: Mapping[str, tuple[str, ...]] = {
    "litert": ("edgetpu", "npu", "gpu", "xnnpack", "cpu"),
    "onnxruntime": ("tensorrt", "cuda", "openvino", "qnn", "coreml", "nnapi", "xnnpack", "cpu"),
    "coreml": ("ane", "gpu", "cpu"),
    "tflm": ("cmsis-nn", "esp-nn", "reference"),
}

#: The ONNX Runtime execution provider each ``onnxruntime:<backend>`` needs; a profile
#: that lists the backend must list the provider in ``onnx_providers`` too.
ORT_BACKEND_PROVIDERS: Mapping[str, str] = {
    "tensorrt": "TensorrtExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "openvino": "OpenVINOExecutionProvider",
    "qnn": "QNNExecutionProvider",
    "coreml": "CoreMLExecutionProvider",
    "nnapi": "NnapiExecutionProvider",
    "xnnpack": "XnnpackExecutionProvider",
    "cpu": "CPUExecutionProvider",
}

#: Power-meter hints, in the order the energy meter should try them.
POWER_SOURCES: tuple[str, ...] = (
    "jetson-ina3221",
    "jetson-ina238",
    "vcgencmd-pmic",
    "rapl",
    "hwmon",
    "external",
    "estimate",
)

_PACKAGE = "edgeserve._profiles"
_SOURCE_TREE_DIR = Path(__file__).resolve().parent.parent / "profiles"


# --------------------------------------------------------------------------- dataclasses


@dataclass(frozen=True)
class CpuSpec:
    """The application processor (or the MCU core).

    Attributes:
        model: Human-readable SoC / chip and core description.
        arch: Instruction set, one of :data:`ARCHITECTURES`.
        cores: Number of CPU cores.
        freq_mhz: Highest core clock in MHz (the fastest cluster on big.LITTLE chips).
    """

    model: str
    arch: str
    cores: int
    freq_mhz: int


@dataclass(frozen=True)
class RamRegion:
    """One RAM a microcontroller build can place its arena in.

    Attributes:
        name: Short identifier, e.g. ``"dtcm"``, ``"sram"``, ``"psram"``.
        bytes: What the application can use there.
        note: Why it is slower or what else lives there, with its source.
    """

    name: str
    bytes: int
    note: str = ""


@dataclass(frozen=True)
class MemorySpec:
    """Memory budget.

    Attributes:
        ram_bytes: RAM in bytes; for MCUs the on-chip SRAM the application can use.
        flash_bytes: Program flash in bytes; set for ``mcu`` profiles only.
        ram_regions: ``mcu`` profiles: the RAMs an arena can go to, fastest first (e.g.
            tightly coupled memory, then SRAM, then external PSRAM). Empty: one region,
            ``ram_bytes``.
    """

    ram_bytes: int
    flash_bytes: int | None = None
    ram_regions: tuple[RamRegion, ...] = ()

    def regions(self) -> tuple[RamRegion, ...]:
        """The RAM regions, fastest first; one named "ram" when the profile lists none."""
        return self.ram_regions or (RamRegion("ram", self.ram_bytes),)


@dataclass(frozen=True)
class Accelerator:
    """An NPU, GPU or DSP the runtime can hand work to.

    Attributes:
        name: Short identifier, e.g. ``"edgetpu"``.
        kind: One of :data:`ACCELERATOR_KINDS`.
        library: Delegate or provider library that reaches it, when there is one.
        note: Free text (throughput, caveats).
    """

    name: str
    kind: str
    library: str | None = None
    note: str = ""


@dataclass(frozen=True)
class RuntimeSpec:
    """How the on-device runtime should execute a model.

    Attributes:
        backends: ``"<engine>:<backend>"`` names in preference order; the first that
            loads and runs wins.
        onnx_providers: ONNX Runtime execution providers in preference order (may be empty).
        threads: CPU threads for CPU kernels.
    """

    backends: tuple[str, ...]
    onnx_providers: tuple[str, ...]
    threads: int

    @property
    def engines(self) -> tuple[str, ...]:
        """The distinct engines named in :attr:`backends`, in preference order."""
        return tuple(dict.fromkeys(b.split(":", 1)[0] for b in self.backends))


@dataclass(frozen=True)
class QuantizationSpec:
    """Which quantized kernels the targeted runtime can execute.

    Attributes:
        int16_activations: 16-bit activations with 8-bit weights (16x8) are supported.
        per_channel: Per-channel (per-axis) weight scales are supported.
    """

    int16_activations: bool
    per_channel: bool


@dataclass(frozen=True)
class PowerSpec:
    """Power envelope and where to measure it.

    Attributes:
        idle_w: Idle power in watts.
        peak_w: Peak sustained power in watts.
        sources: Power-meter hints from :data:`POWER_SOURCES`, in the order to try them.
        rail: Name of the total-input rail on boards with rail monitors (Jetson).
    """

    idle_w: float
    peak_w: float
    sources: tuple[str, ...]
    rail: str | None = None


@dataclass(frozen=True)
class ThermalSpec:
    """Thermal limits and where to read temperatures.

    Attributes:
        throttle_c: Temperature (°C) at which the device starts to throttle.
        critical_c: Temperature (°C) of the hard limit or shutdown.
        zones: ``/sys/class/thermal/thermal_zone*/type`` names to read (empty on MCUs
            and phones, where user space cannot read them).
    """

    throttle_c: float
    critical_c: float
    zones: tuple[str, ...]


@dataclass(frozen=True)
class Profile:
    """One device profile, validated.

    Attributes:
        name: Profile name (equals the file stem of bundled profiles).
        kind: One of :data:`KINDS`.
        description: One or two sentences about the device and the variant described.
        cpu: See :class:`CpuSpec`.
        memory: See :class:`MemorySpec`.
        accelerators: See :class:`Accelerator`; empty when the device has none usable.
        runtime: See :class:`RuntimeSpec`.
        quantization: See :class:`QuantizationSpec`.
        power: See :class:`PowerSpec`.
        thermal: See :class:`ThermalSpec`.
        origin: Where the profile was read from (a path, or ``"<dict>"``); not part of
            the profile's value, so not compared and not in :meth:`to_dict`.
    """

    name: str
    kind: str
    description: str
    cpu: CpuSpec
    memory: MemorySpec
    accelerators: tuple[Accelerator, ...]
    runtime: RuntimeSpec
    quantization: QuantizationSpec
    power: PowerSpec
    thermal: ThermalSpec
    origin: str = field(default="<dict>", compare=False, repr=False)

    @property
    def is_mcu(self) -> bool:
        """Whether this is a microcontroller profile."""
        return self.kind == "mcu"

    def to_dict(self) -> dict[str, Any]:
        """Return the profile as plain JSON-able data in the TOML file's layout.

        Optional values that are unset are left out (TOML has no null), so
        ``Profile.from_dict(p.to_dict()) == p``.
        """
        data: dict[str, Any] = _plain(asdict(self))
        data.pop("origin", None)
        if not data["memory"].get("ram_regions"):
            data["memory"].pop("ram_regions", None)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], origin: str = "<dict>") -> Profile:
        """Validate parsed profile data and build a :class:`Profile`.

        Args:
            data: The parsed TOML document (or :meth:`to_dict` output).
            origin: Where the data came from; used in error messages.

        Raises:
            ProfileError: On any unknown, missing, mistyped or impossible value.
        """
        return _parse_profile(data, origin)


def _plain(value: Any) -> Any:
    """Tuples to lists, None-valued keys dropped, recursively."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


# --------------------------------------------------------------------------- finding files


def profile_dir() -> Traversable:
    """Return the folder holding the bundled profile files.

    The installed package data ``edgeserve._profiles`` when importable; otherwise (running
    from a source checkout without installing) the ``profiles/`` folder next to
    ``edgeserve/``.

    Raises:
        ProfileError: If neither exists (a broken installation).
    """
    try:
        root = resources.files(_PACKAGE)
    except ModuleNotFoundError:
        root = None
    if root is not None and root.is_dir():
        return root
    if _SOURCE_TREE_DIR.is_dir():
        return _SOURCE_TREE_DIR
    raise ProfileError(
        f"the bundled device profiles are missing: neither the package {_PACKAGE} nor "
        f"{_SOURCE_TREE_DIR} exists. Reinstall edgeserve."
    )


def list_profiles() -> list[str]:
    """Return the names of the bundled profiles, sorted."""
    return sorted(
        entry.name[: -len(".toml")]
        for entry in profile_dir().iterdir()
        if entry.name.endswith(".toml") and entry.is_file()
    )


def load_profile(name_or_path: str | os.PathLike[str]) -> Profile:
    """Load a bundled profile by name, or a user's profile file by path.

    A string is taken as a path when it ends in ``.toml`` or contains a path separator;
    otherwise it is a bundled profile name.

    Args:
        name_or_path: ``"raspberry-pi-5"``, or ``"boards/my-board.toml"``, or a ``Path``.

    Returns:
        The validated profile.

    Raises:
        ProfileError: Unknown name (with a suggestion), unreadable or malformed file,
            or any validation failure.
    """
    if isinstance(name_or_path, os.PathLike) or _looks_like_path(name_or_path):
        path = Path(name_or_path)
        try:
            text = read_settings(path).decode("utf-8")
        except FileNotFoundError:
            hint = ""
            if path.parent == Path(".") and path.stem in list_profiles():
                hint = f' Did you mean the bundled profile "{path.stem}"?'
            raise ProfileError(f"profile file {path} does not exist.{hint}") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ProfileError(f"cannot read profile file {path}: {exc}") from exc
        return _parse_text(text, str(path), expected_name=None)

    name = str(name_or_path)
    known = list_profiles()
    if name not in known:
        raise ProfileError(
            f'unknown profile "{name}".{did_you_mean(name, known)} Known: {", ".join(known)}. '
            "A path to your own .toml file works too."
        )
    resource = profile_dir() / f"{name}.toml"
    return _parse_text(resource.read_text(encoding="utf-8"), str(resource), expected_name=name)


def _looks_like_path(value: str) -> bool:
    separators = {"/", os.sep} | ({os.altsep} if os.altsep else set())
    return value.endswith(".toml") or any(sep in value for sep in separators)


def _parse_text(text: str, origin: str, expected_name: str | None) -> Profile:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{origin} is not valid TOML: {exc}") from exc
    except RecursionError as exc:
        raise ProfileError(f"{origin} nests tables or arrays too deeply to read") from exc
    profile = _parse_profile(data, origin)
    if expected_name is not None and profile.name != expected_name:
        raise ProfileError(
            f'key "name" at the top level of {origin} is "{profile.name}" but the file is '
            f'{expected_name}.toml; they must match (name = "{expected_name}")'
        )
    return profile


# --------------------------------------------------------------------------- validation

_TYPE_NAMES = {
    bool: ("a boolean", "boolean"),
    int: ("an integer", "integer"),
    float: ("a number", "float"),
    str: ("a string", "string"),
    list: ("an array", "array"),
    dict: ("a table", "table"),
}


def _show(value: Any) -> str:
    """A value as it would look in TOML, plus its type, for error messages."""
    if isinstance(value, bool):
        shown = "true" if value else "false"
    else:
        shown = f'"{value}"' if isinstance(value, str) else repr(value)
    kind = _TYPE_NAMES[type(value)][1] if type(value) in _TYPE_NAMES else type(value).__name__
    return f"{shown} ({kind})"


class _Table:
    """Typed, strict access to one TOML table, with errors naming file and key."""

    def __init__(self, data: Any, label: str | None, origin: str) -> None:
        # label: None for the top level, else "[power]", "[[accelerators]] #2", ...
        self.where = "at the top level" if label is None else f"in {label}"
        self.origin = origin
        if not isinstance(data, Mapping):
            raise ProfileError(
                f"{label or 'the document'} in {origin} must be a table, got {_show(data)}"
            )
        self.data = data

    def error(self, key: str, problem: str) -> ProfileError:
        return ProfileError(f'key "{key}" {self.where} of {self.origin} {problem}')

    def check_keys(self, required: Sequence[str], optional: Sequence[str] = ()) -> None:
        allowed = sorted((*required, *optional))
        for key in self.data:
            if key not in allowed:
                raise ProfileError(
                    f'unknown key "{key}" {self.where} of {self.origin}.'
                    f"{did_you_mean(key, allowed)} Allowed keys: {', '.join(allowed)}"
                )
        for key in required:
            if key not in self.data:
                raise ProfileError(f'missing key "{key}" {self.where} of {self.origin}')

    def _typed(self, key: str, kind: type) -> Any:
        value = self.data[key]
        # bool is an int subclass in Python; TOML keeps them apart, and so do we.
        ok = isinstance(value, kind) and not (kind is not bool and isinstance(value, bool))
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if not ok:
            raise self.error(key, f"must be {_TYPE_NAMES[kind][0]}, got {_show(value)}")
        return value

    def string(self, key: str, choices: Sequence[str] | None = None) -> str:
        value: str = self._typed(key, str)
        if not value.strip():
            raise self.error(key, "must not be empty")
        if choices is not None and value not in choices:
            raise self.error(
                key,
                f'must be one of {", ".join(choices)}, got "{value}".'
                f"{did_you_mean(value, choices)}",
            )
        return value

    def optional_string(self, key: str) -> str | None:
        return self.string(key) if key in self.data else None

    def text(self, key: str, default: str = "") -> str:
        """An optional free-text string; empty is fine."""
        value: str = self._typed(key, str) if key in self.data else default
        return value

    def boolean(self, key: str) -> bool:
        value: bool = self._typed(key, bool)
        return value

    def integer(self, key: str, minimum: int = 0) -> int:
        value: int = self._typed(key, int)
        self._check_minimum(key, value, minimum)
        return value

    def optional_integer(self, key: str, minimum: int = 0) -> int | None:
        return self.integer(key, minimum) if key in self.data else None

    def number(self, key: str, minimum: float = 0.0) -> float:
        value: float = self._typed(key, float)
        if not math.isfinite(value):
            raise self.error(key, f"must be a finite number, got {_show(value)}")
        self._check_minimum(key, value, minimum)
        return value

    def _check_minimum(self, key: str, value: float, minimum: float) -> None:
        if value < 0:
            raise self.error(key, f"must not be negative, got {value!r}")
        if value < minimum:
            raise self.error(key, f"must be at least {minimum!r}, got {value!r}")

    def strings(
        self, key: str, choices: Sequence[str] | None = None, *, non_empty: bool = False
    ) -> tuple[str, ...]:
        items = self._typed(key, list)
        out: list[str] = []
        for i, item in enumerate(items):
            if not isinstance(item, str) or not item.strip():
                raise self.error(key, f"must hold non-empty strings; item {i} is {_show(item)}")
            if choices is not None and item not in choices:
                raise self.error(
                    key,
                    f'holds "{item}", which is not one of {", ".join(choices)}.'
                    f"{did_you_mean(item, choices)}",
                )
            if item in out:
                raise self.error(key, f'lists "{item}" twice')
            out.append(item)
        if non_empty and not out:
            raise self.error(key, "must not be empty")
        return tuple(out)

    def table(self, key: str, label: str) -> _Table:
        if key not in self.data:
            raise ProfileError(f"missing table [{label}] in {self.origin}")
        return _Table(self.data[key], f"[{label}]", self.origin)


_TOP_KEYS = ("name", "kind", "description")
# Required too, but reported as "missing table [cpu]" by _Table.table().
_TOP_TABLES = ("cpu", "memory", "runtime", "quantization", "power", "thermal", "accelerators")


def _parse_profile(data: Mapping[str, Any], origin: str) -> Profile:
    top = _Table(data, None, origin)
    top.check_keys(_TOP_KEYS, _TOP_TABLES)
    kind = top.string("kind", KINDS)

    cpu_t = top.table("cpu", "cpu")
    cpu_t.check_keys(("model", "arch", "cores", "freq_mhz"))
    cpu = CpuSpec(
        model=cpu_t.string("model"),
        arch=cpu_t.string("arch", ARCHITECTURES),
        cores=cpu_t.integer("cores", minimum=1),
        freq_mhz=cpu_t.integer("freq_mhz", minimum=1),
    )

    mem_t = top.table("memory", "memory")
    mem_t.check_keys(("ram_bytes",), ("flash_bytes", "ram_regions"))
    if kind == "mcu" and "flash_bytes" not in mem_t.data:
        raise ProfileError(
            f'missing key "flash_bytes" in [memory] of {origin} (required when kind = "mcu")'
        )
    if kind != "mcu" and "flash_bytes" in mem_t.data:
        raise mem_t.error(
            "flash_bytes", f'is only for kind = "mcu" profiles; this one is kind = "{kind}"'
        )
    memory = MemorySpec(
        ram_bytes=mem_t.integer("ram_bytes", minimum=1),
        flash_bytes=mem_t.optional_integer("flash_bytes", minimum=1),
        ram_regions=_parse_ram_regions(mem_t, kind, origin),
    )

    accelerators = _parse_accelerators(top, origin)
    runtime = _parse_runtime(top.table("runtime", "runtime"), kind)

    q_t = top.table("quantization", "quantization")
    q_t.check_keys(("int16_activations", "per_channel"))
    quantization = QuantizationSpec(
        int16_activations=q_t.boolean("int16_activations"),
        per_channel=q_t.boolean("per_channel"),
    )

    p_t = top.table("power", "power")
    p_t.check_keys(("idle_w", "peak_w", "sources"), ("rail",))
    power = PowerSpec(
        idle_w=p_t.number("idle_w"),
        peak_w=p_t.number("peak_w"),
        sources=p_t.strings("sources", POWER_SOURCES, non_empty=True),
        rail=p_t.optional_string("rail"),
    )
    if power.peak_w <= 0:
        raise p_t.error("peak_w", f"must be above 0, got {power.peak_w!r}")
    if power.idle_w > power.peak_w:
        raise p_t.error("idle_w", f"({power.idle_w!r}) must not exceed peak_w ({power.peak_w!r})")

    t_t = top.table("thermal", "thermal")
    t_t.check_keys(("throttle_c", "critical_c", "zones"))
    thermal = ThermalSpec(
        throttle_c=t_t.number("throttle_c"),
        critical_c=t_t.number("critical_c"),
        zones=t_t.strings("zones"),
    )
    if thermal.throttle_c >= thermal.critical_c:
        raise t_t.error(
            "throttle_c",
            f"({thermal.throttle_c!r}) must be below critical_c ({thermal.critical_c!r})",
        )
    if kind in ("mcu", "mobile") and thermal.zones:
        raise t_t.error(
            "zones",
            f'must be empty for kind = "{kind}" (no readable /sys/class/thermal); '
            f"got {list(thermal.zones)}",
        )

    return Profile(
        name=top.string("name"),
        kind=kind,
        description=top.string("description"),
        cpu=cpu,
        memory=memory,
        accelerators=accelerators,
        runtime=runtime,
        quantization=quantization,
        power=power,
        thermal=thermal,
        origin=origin,
    )


def _parse_ram_regions(mem_t: _Table, kind: str, origin: str) -> tuple[RamRegion, ...]:
    raw = mem_t.data.get("ram_regions", [])
    if raw and kind != "mcu":
        raise mem_t.error("ram_regions", f'is only for kind = "mcu" profiles; this one is kind = "{kind}"')
    if not isinstance(raw, list):
        raise mem_t.error("ram_regions", f"must be an array of tables, fastest first, got {_show(raw)}")
    out: list[RamRegion] = []
    for i, item in enumerate(raw, start=1):
        t = _Table(item, f"[memory] ram_regions #{i}", origin)
        t.check_keys(("name", "bytes"), ("note",))
        region = RamRegion(name=t.string("name"), bytes=t.integer("bytes", minimum=1), note=t.text("note"))
        if any(r.name == region.name for r in out):
            raise t.error("name", f'"{region.name}" is used by an earlier region')
        out.append(region)
    return tuple(out)


def _parse_accelerators(top: _Table, origin: str) -> tuple[Accelerator, ...]:
    raw = top.data.get("accelerators", [])
    if not isinstance(raw, list):
        raise top.error(
            "accelerators", f"must be an array of tables ([[accelerators]]), got {_show(raw)}"
        )
    out: list[Accelerator] = []
    for i, item in enumerate(raw, start=1):
        t = _Table(item, f"[[accelerators]] #{i}", origin)
        t.check_keys(("name", "kind"), ("library", "note"))
        acc = Accelerator(
            name=t.string("name"),
            kind=t.string("kind", ACCELERATOR_KINDS),
            library=t.optional_string("library"),
            note=t.text("note"),
        )
        if any(a.name == acc.name for a in out):
            raise t.error("name", f'"{acc.name}" is used by an earlier accelerator')
        out.append(acc)
    return tuple(out)


def _parse_runtime(t: _Table, kind: str) -> RuntimeSpec:
    t.check_keys(("backends", "onnx_providers", "threads"))
    backends = t.strings("backends", non_empty=True)
    for backend in backends:
        _check_backend(t, backend, kind)
    providers = t.strings("onnx_providers")
    for provider in providers:
        if not provider.endswith("ExecutionProvider"):
            known = sorted(ORT_BACKEND_PROVIDERS.values())
            raise t.error(
                "onnx_providers",
                f'holds "{provider}", which is not an ONNX Runtime execution provider name '
                f"(they end in ExecutionProvider).{did_you_mean(provider, known)}",
            )
    for backend in backends:
        engine, _, name = backend.partition(":")
        needed = ORT_BACKEND_PROVIDERS.get(name) if engine == "onnxruntime" else None
        if needed is not None and needed not in providers:
            raise t.error("onnx_providers", f'must list {needed}, which backend "{backend}" needs')
    return RuntimeSpec(
        backends=backends, onnx_providers=providers, threads=t.integer("threads", minimum=1)
    )


def _check_backend(t: _Table, backend: str, kind: str) -> None:
    engine, sep, name = backend.partition(":")
    if not sep:
        raise t.error(
            "backends",
            f'holds "{backend}"; entries are "<engine>:<backend>", e.g. "litert:xnnpack"',
        )
    if engine not in KNOWN_BACKENDS:
        raise t.error(
            "backends",
            f'holds "{backend}" with unknown engine "{engine}".'
            f"{did_you_mean(engine, KNOWN_BACKENDS)} Engines: {', '.join(KNOWN_BACKENDS)}",
        )
    names = KNOWN_BACKENDS[engine]
    if name not in names:
        choices = [f"{engine}:{n}" for n in names]
        raise t.error(
            "backends",
            f'holds unknown backend "{backend}".{did_you_mean(backend, choices)} '
            f"Known for {engine}: {', '.join(choices)}",
        )
    if kind == "mcu" and engine != "tflm":
        raise t.error(
            "backends", f'holds "{backend}", but a kind = "mcu" profile can only use tflm backends'
        )
