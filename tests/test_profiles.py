"""Tests for edgeserve.device_profiles: the bundled device profiles and the strict loader."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

from edgeserve import device_profiles as profiles
from edgeserve.errors import ProfileError
from edgeserve.device_profiles import (
    Profile,
    list_profiles,
    load_profile,
    profile_dir,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

EXPECTED_KINDS = {
    "raspberry-pi-4": "linux",
    "raspberry-pi-5": "linux",
    "jetson-nano": "linux",
    "jetson-orin-nano": "linux",
    "coral-dev-board": "linux",
    "iphone-15-pro": "mobile",
    "pixel-8": "mobile",
    "stm32f746-discovery": "mcu",
    "arduino-nano-33-ble": "mcu",
    "esp32-s3": "mcu",
    "raspberry-pi-pico-2": "mcu",
    "nrf5340-dk": "mcu",
    "stm32h747": "mcu",
    "seeed-xiao-esp32s3": "mcu",
    "ambiq-apollo3": "mcu",
    "host": "linux",
}

KIB = 1024
MIB = 1024 * KIB

# A small valid profile that the rejection tests break one key at a time.
VALID = """\
name = "test-board"
kind = "linux"
description = "A board made up for tests."

[cpu]
model = "Test SoC, 4x Cortex-A53"
arch = "aarch64"
cores = 4
freq_mhz = 1500

[memory]
ram_bytes = 1073741824

[[accelerators]]
name = "edgetpu"
kind = "npu"
library = "libedgetpu.so.1"
note = "test"

[runtime]
backends = ["litert:edgetpu", "litert:xnnpack", "onnxruntime:cpu"]
onnx_providers = ["CPUExecutionProvider"]
threads = 4

[quantization]
int16_activations = false
per_channel = true

[power]
idle_w = 2.7
peak_w = 12.0
sources = ["external", "estimate"]

[thermal]
throttle_c = 80.0
critical_c = 90.0
zones = ["cpu-thermal"]
"""

VALID_MCU = """\
name = "test-mcu"
kind = "mcu"
description = "An MCU made up for tests."

[cpu]
model = "Test MCU, Cortex-M4F"
arch = "armv7e-m"
cores = 1
freq_mhz = 64

[memory]
ram_bytes = 262144
flash_bytes = 1048576

[runtime]
backends = ["tflm:cmsis-nn", "tflm:reference"]
onnx_providers = []
threads = 1

[quantization]
int16_activations = true
per_channel = true

[power]
idle_w = 0.00001
peak_w = 0.02
sources = ["estimate"]

[thermal]
throttle_c = 80.0
critical_c = 85.0
zones = []
"""


def write(tmp_path: Path, text: str, name: str = "board.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def replaced(text: str, old: str, new: str) -> str:
    assert old in text, f"test bug: {old!r} not in the template"
    return text.replace(old, new, 1)


def rejection(tmp_path: Path, text: str) -> str:
    """Load text as a user profile; return the ProfileError message, which must name the file."""
    path = write(tmp_path, text)
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    message = str(info.value)
    assert str(path) in message
    return message


# --------------------------------------------------------------------------- bundled profiles


def test_list_profiles_is_exactly_the_bundled_set_sorted() -> None:
    assert list_profiles() == sorted(EXPECTED_KINDS)


@pytest.mark.parametrize("name", sorted(EXPECTED_KINDS))
def test_bundled_profile_loads_with_expected_kind(name: str) -> None:
    profile = load_profile(name)
    assert profile.name == name
    assert profile.kind == EXPECTED_KINDS[name]
    assert profile.runtime.backends, "a profile must name at least one backend"
    assert profile.power.idle_w <= profile.power.peak_w
    assert profile.thermal.throttle_c < profile.thermal.critical_c


@pytest.mark.parametrize("name", sorted(EXPECTED_KINDS))
def test_flash_bytes_exactly_on_mcu_profiles(name: str) -> None:
    profile = load_profile(name)
    if profile.kind == "mcu":
        assert profile.is_mcu
        assert profile.memory.flash_bytes is not None and profile.memory.flash_bytes > 0
        assert profile.runtime.engines == ("tflm",)
        assert profile.thermal.zones == ()
    else:
        assert profile.memory.flash_bytes is None


def test_stm32f746_discovery_figures() -> None:
    p = load_profile("stm32f746-discovery")
    assert p.memory.flash_bytes == 1 * MIB == 1048576
    assert p.memory.ram_bytes == 320 * KIB == 327680
    assert (p.cpu.arch, p.cpu.cores, p.cpu.freq_mhz) == ("armv7e-m", 1, 216)
    assert p.runtime.backends[0] == "tflm:cmsis-nn"
    assert p.runtime.onnx_providers == ()


def test_arduino_nano_33_ble_figures() -> None:
    p = load_profile("arduino-nano-33-ble")
    assert "nRF52840" in p.cpu.model
    assert p.memory.flash_bytes == 1 * MIB
    assert p.memory.ram_bytes == 256 * KIB
    assert (p.cpu.arch, p.cpu.freq_mhz) == ("armv7e-m", 64)


def test_esp32_s3_figures_for_the_devkitc_n8r8() -> None:
    p = load_profile("esp32-s3")
    assert "ESP32-S3-DevKitC-1" in p.description and "N8R8" in p.description
    assert p.memory.flash_bytes == 8 * MIB
    assert p.memory.ram_bytes == 512 * KIB
    assert (p.cpu.arch, p.cpu.cores, p.cpu.freq_mhz) == ("xtensa", 2, 240)
    assert p.runtime.backends[0] == "tflm:esp-nn"


def test_accelerated_linux_profiles() -> None:
    coral = load_profile("coral-dev-board")
    assert coral.runtime.backends[0] == "litert:edgetpu"
    assert [(a.name, a.kind, a.library) for a in coral.accelerators] == [
        ("edgetpu", "npu", "libedgetpu.so.1")
    ]
    assert coral.quantization.int16_activations is False

    orin = load_profile("jetson-orin-nano")
    assert orin.runtime.backends[0] == "onnxruntime:tensorrt"
    assert orin.runtime.onnx_providers[0] == "TensorrtExecutionProvider"
    assert (orin.power.sources[0], orin.power.rail) == ("jetson-ina3221", "VDD_IN")
    assert orin.cpu.cores == 6

    pi5 = load_profile("raspberry-pi-5")
    assert pi5.power.sources[0] == "vcgencmd-pmic"
    assert pi5.thermal.zones == ("cpu-thermal",)
    assert pi5.memory.ram_bytes == 8 * 1024 * MIB


def _numeric_leaves(value: object) -> int:
    if isinstance(value, dict):
        return sum(_numeric_leaves(v) for v in value.values())
    if isinstance(value, list):
        return sum(_numeric_leaves(v) for v in value)
    return int(isinstance(value, (int, float)) and not isinstance(value, bool))


_ASSIGNMENT = re.compile(r"^\s*[A-Za-z0-9_-]+\s*=\s*(?P<value>.+)$")


@pytest.mark.parametrize("name", sorted(EXPECTED_KINDS))
def test_every_numeric_value_has_a_source_comment(name: str) -> None:
    text = (profile_dir() / f"{name}.toml").read_text(encoding="utf-8")
    lines = text.splitlines()
    numeric_lines = []
    for i, line in enumerate(lines):
        match = _ASSIGNMENT.match(line)
        if not match:
            continue
        try:  # parse the right-hand side on its own (a trailing comment is fine in TOML)
            value = tomllib.loads(f"x = {match.group('value')}")["x"]
        except tomllib.TOMLDecodeError:
            continue
        if _numeric_leaves(value):
            numeric_lines.append(i)
            above = lines[i - 1] if i > 0 else ""
            sourced = "# source:" in line or above.lstrip().startswith("# source:")
            assert sourced, (
                f"{name}.toml line {i + 1} has a number without a '# source:' comment: {line!r}"
            )
    # Every number in the parsed document sits on one of the lines checked above
    # (catches numbers hidden in multi-line arrays or inline tables).
    assert _numeric_leaves(tomllib.loads(text)) == len(numeric_lines)


# --------------------------------------------------------------------------- names, paths, dicts


def test_unknown_profile_name_suggests_the_closest() -> None:
    with pytest.raises(ProfileError) as info:
        load_profile("raspbery-pi-5")
    message = str(info.value)
    assert message.startswith('unknown profile "raspbery-pi-5". Did you mean "raspberry-pi-5"?')
    assert "Known: " in message and "jetson-orin-nano" in message


def test_user_profile_file_by_str_and_path(tmp_path: Path) -> None:
    path = write(tmp_path, VALID, name="whatever-file-name.toml")
    by_path = load_profile(path)
    by_str = load_profile(str(path))
    assert by_path == by_str
    assert by_path.name == "test-board"  # user files need not match their file name
    assert by_path.origin == str(path)
    assert by_path.accelerators[0].library == "libedgetpu.so.1"
    assert by_path.runtime.engines == ("litert", "onnxruntime")


def test_missing_user_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(ProfileError, match="does not exist"):
        load_profile(missing)


@pytest.mark.parametrize("name", sorted(EXPECTED_KINDS))
def test_to_dict_round_trips_through_json(name: str) -> None:
    profile = load_profile(name)
    data = profile.to_dict()
    text = json.dumps(data)  # raises if anything is not JSON-able
    back = json.loads(text)
    assert back == data
    assert "origin" not in data
    assert Profile.from_dict(back) == profile
    assert isinstance(data["runtime"]["backends"], list)
    assert set(data) == {
        "name", "kind", "description", "cpu", "memory", "accelerators",
        "runtime", "quantization", "power", "thermal",
    }  # fmt: skip


def test_to_dict_matches_the_toml_file() -> None:
    text = (profile_dir() / "jetson-nano.toml").read_text(encoding="utf-8")
    assert load_profile("jetson-nano").to_dict() == tomllib.loads(text)


def test_profiles_are_frozen() -> None:
    profile = load_profile("host")
    with pytest.raises(AttributeError):
        profile.cpu.cores = 64  # type: ignore[misc]


def test_profile_dir_falls_back_to_the_source_tree() -> None:
    # Run with PYTHONPATH=. the package edgeserve._profiles is not importable.
    root = profile_dir()
    assert (root / "raspberry-pi-5.toml").is_file()


def test_profile_dir_prefers_the_installed_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "_profiles"
    package.mkdir()
    (package / "__init__.py").write_text('"""Fake package data."""\n', encoding="utf-8")
    (package / "test-board.toml").write_text(VALID, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(
        "edgeserve._profiles", package / "__init__.py", submodule_search_locations=[str(package)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, "edgeserve._profiles", module)

    assert Path(str(profile_dir())) == package
    assert list_profiles() == ["test-board"]
    assert load_profile("test-board").name == "test-board"


def test_bundled_name_must_equal_file_stem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, VALID, name="my-board.toml")  # but name = "test-board" inside
    monkeypatch.setattr(profiles, "profile_dir", lambda: tmp_path)
    with pytest.raises(ProfileError) as info:
        load_profile("my-board")
    message = str(info.value)
    assert 'key "name"' in message and '"test-board"' in message and "my-board.toml" in message


# --------------------------------------------------------------------------- rejections


def test_valid_templates_load(tmp_path: Path) -> None:
    assert load_profile(write(tmp_path, VALID)).kind == "linux"
    assert load_profile(write(tmp_path, VALID_MCU, "mcu.toml")).memory.flash_bytes == 1048576


def test_unknown_key_in_a_table_with_suggestion(tmp_path: Path) -> None:
    message = rejection(tmp_path, replaced(VALID, "idle_w = 2.7", "idle_watts = 2.7"))
    assert message.startswith('unknown key "idle_watts" in [power] of ')
    assert 'Did you mean "idle_w"?' in message
    assert "Allowed keys: idle_w, peak_w, rail, sources" in message


def test_unknown_key_at_top_level(tmp_path: Path) -> None:
    message = rejection(tmp_path, replaced(VALID, 'kind = "linux"', 'kind = "linux"\nknd = "x"'))
    assert 'unknown key "knd" at the top level' in message and 'Did you mean "kind"?' in message


def test_unknown_key_in_an_accelerator(tmp_path: Path) -> None:
    message = rejection(
        tmp_path, replaced(VALID, 'library = "libedgetpu.so.1"', 'libary = "libedgetpu.so.1"')
    )
    assert (
        'unknown key "libary" in [[accelerators]] #1' in message
        and 'Did you mean "library"?' in message
    )


def test_unknown_table(tmp_path: Path) -> None:
    message = rejection(tmp_path, VALID + "\n[thermals]\nzones = []\n")
    assert 'unknown key "thermals"' in message and 'Did you mean "thermal"?' in message


def test_missing_key(tmp_path: Path) -> None:
    message = rejection(tmp_path, replaced(VALID, "peak_w = 12.0\n", ""))
    assert 'missing key "peak_w" in [power]' in message


def test_missing_table(tmp_path: Path) -> None:
    text = VALID[: VALID.index("[thermal]")]
    message = rejection(tmp_path, text)
    assert "missing table [thermal]" in message


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            "cores = 4",
            'cores = "four"',
            ['key "cores" in [cpu]', "must be an integer", '"four" (string)'],
        ),
        ("cores = 4", "cores = 4.0", ['key "cores"', "must be an integer", "4.0 (float)"]),
        ("cores = 4", "cores = true", ['key "cores"', "must be an integer", "true (boolean)"]),
        (
            "idle_w = 2.7",
            'idle_w = "2.7"',
            ['key "idle_w" in [power]', "must be a number", '"2.7" (string)'],
        ),
        (
            "per_channel = true",
            "per_channel = 1",
            ['key "per_channel"', "must be a boolean", "1 (integer)"],
        ),
        ('zones = ["cpu-thermal"]', 'zones = "cpu-thermal"', ['key "zones"', "must be an array"]),
        (
            'zones = ["cpu-thermal"]',
            "zones = [1]",
            ['key "zones"', "non-empty strings", "1 (integer)"],
        ),
        (
            'description = "A board made up for tests."',
            "description = 3",
            ['key "description"', "must be a string"],
        ),
    ],
)
def test_wrong_types(tmp_path: Path, old: str, new: str, expected: list[str]) -> None:
    message = rejection(tmp_path, replaced(VALID, old, new))
    for part in expected:
        assert part in message


def test_integer_accepted_where_a_number_is_expected(tmp_path: Path) -> None:
    profile = load_profile(write(tmp_path, replaced(VALID, "peak_w = 12.0", "peak_w = 12")))
    assert profile.power.peak_w == 12.0 and isinstance(profile.power.peak_w, float)


def test_kind_not_in_allowed_set(tmp_path: Path) -> None:
    message = rejection(tmp_path, replaced(VALID, 'kind = "linux"', 'kind = "desktop"'))
    assert 'key "kind" at the top level' in message
    assert "must be one of linux, mobile, mcu" in message and '"desktop"' in message


def test_unknown_arch_suggests(tmp_path: Path) -> None:
    message = rejection(tmp_path, replaced(VALID, 'arch = "aarch64"', 'arch = "arm64x"'))
    assert 'key "arch"' in message and '"arm64x"' in message


def test_flash_bytes_missing_for_mcu(tmp_path: Path) -> None:
    message = rejection(tmp_path, replaced(VALID_MCU, "flash_bytes = 1048576\n", ""))
    assert 'missing key "flash_bytes" in [memory]' in message and 'kind = "mcu"' in message


def test_flash_bytes_refused_for_linux(tmp_path: Path) -> None:
    message = rejection(
        tmp_path,
        replaced(VALID, "ram_bytes = 1073741824", "ram_bytes = 1073741824\nflash_bytes = 8"),
    )
    assert 'key "flash_bytes" in [memory]' in message and 'kind = "mcu"' in message


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("throttle_c = 80.0", "throttle_c = 95.0"),
        ("throttle_c = 80.0", "throttle_c = 90.0"),  # equal is refused too
    ],
)
def test_throttle_must_be_below_critical(tmp_path: Path, old: str, new: str) -> None:
    message = rejection(tmp_path, replaced(VALID, old, new))
    assert 'key "throttle_c" in [thermal]' in message and "critical_c (90.0)" in message


@pytest.mark.parametrize(
    ("old", "new", "key", "shown"),
    [
        ("ram_bytes = 1073741824", "ram_bytes = -1", "ram_bytes", "-1"),
        ("idle_w = 2.7", "idle_w = -0.5", "idle_w", "-0.5"),
        ("critical_c = 90.0", "critical_c = -10.0", "critical_c", "-10.0"),
        ("threads = 4", "threads = -2", "threads", "-2"),
    ],
)
def test_negative_numbers(tmp_path: Path, old: str, new: str, key: str, shown: str) -> None:
    message = rejection(tmp_path, replaced(VALID, old, new))
    assert f'key "{key}"' in message and "must not be negative" in message and shown in message


def test_zero_cores_refused(tmp_path: Path) -> None:
    message = rejection(tmp_path, replaced(VALID, "cores = 4", "cores = 0"))
    assert 'key "cores"' in message and "at least 1" in message


def test_idle_above_peak(tmp_path: Path) -> None:
    message = rejection(tmp_path, replaced(VALID, "idle_w = 2.7", "idle_w = 15.0"))
    assert (
        'key "idle_w" in [power]' in message and "(15.0) must not exceed peak_w (12.0)" in message
    )


def test_non_finite_number(tmp_path: Path) -> None:
    message = rejection(tmp_path, replaced(VALID, "peak_w = 12.0", "peak_w = inf"))
    assert 'key "peak_w"' in message and "finite" in message


def test_malformed_toml_is_a_profile_error(tmp_path: Path) -> None:
    message = rejection(tmp_path, replaced(VALID, 'name = "test-board"', 'name = "test-board'))
    assert "is not valid TOML" in message
    assert "line 1" in message  # the parser's own location is kept


def test_unknown_backend_suggests(tmp_path: Path) -> None:
    message = rejection(tmp_path, replaced(VALID, '"litert:xnnpack"', '"litert:xnnpak"'))
    assert 'key "backends" in [runtime]' in message and 'Did you mean "litert:xnnpack"?' in message


def test_unknown_engine_suggests(tmp_path: Path) -> None:
    message = rejection(tmp_path, replaced(VALID, '"onnxruntime:cpu"', '"onnxrt:cpu"'))
    assert 'unknown engine "onnxrt"' in message and 'Did you mean "onnxruntime"?' in message


def test_ort_backend_needs_its_provider(tmp_path: Path) -> None:
    message = rejection(
        tmp_path,
        replaced(VALID, 'onnx_providers = ["CPUExecutionProvider"]', "onnx_providers = []"),
    )
    assert (
        'key "onnx_providers"' in message
        and "CPUExecutionProvider" in message
        and "onnxruntime:cpu" in message
    )


def test_bad_provider_name(tmp_path: Path) -> None:
    text = replaced(VALID, '["CPUExecutionProvider"]', '["CPUExecutionProvider", "CUDAProvider"]')
    message = rejection(tmp_path, text)
    assert '"CUDAProvider"' in message and 'Did you mean "CUDAExecutionProvider"?' in message


def test_mcu_cannot_use_litert(tmp_path: Path) -> None:
    message = rejection(tmp_path, replaced(VALID_MCU, '"tflm:cmsis-nn", ', '"litert:xnnpack", '))
    assert '"litert:xnnpack"' in message and "tflm" in message


def test_mcu_thermal_zones_must_be_empty(tmp_path: Path) -> None:
    message = rejection(tmp_path, replaced(VALID_MCU, "zones = []", 'zones = ["cpu-thermal"]'))
    assert 'key "zones" in [thermal]' in message


def test_unknown_power_source_suggests(tmp_path: Path) -> None:
    message = rejection(
        tmp_path,
        replaced(VALID, 'sources = ["external", "estimate"]', 'sources = ["jetson-ina321"]'),
    )
    assert '"jetson-ina321"' in message and 'Did you mean "jetson-ina3221"?' in message


def test_unknown_accelerator_kind(tmp_path: Path) -> None:
    message = rejection(tmp_path, replaced(VALID, 'kind = "npu"', 'kind = "tpu"'))
    assert 'key "kind" in [[accelerators]] #1' in message and "npu, gpu, dsp" in message


def test_table_given_as_a_value(tmp_path: Path) -> None:
    text = replaced(
        VALID, 'description = "A board made up for tests."', 'description = "x"\npower = 3'
    )
    text = text[: text.index("[power]")] + text[text.index("[thermal]") :]
    message = rejection(tmp_path, text)
    assert "[power]" in message and "must be a table" in message
