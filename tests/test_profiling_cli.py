"""``edgeserve profile`` through CliRunner: JSON on stdout, one-line errors, exit codes, reports.

The runtime Session is replaced by a SimulatedSession (the command opens its session through
``edgeserve.cli.profile._open_session``); sensors come from trees in tmp_path.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from edgeserve.cli import profile as cli_profile
from edgeserve.cli import cli
from edgeserve.profiling.plant import SimulatedSession

JSON_KEYS = {"power_source", "estimated", "idle_power_w", "avg_power_w", "energy_mj_per_inference",
             "inferences_per_wh", "temp_c", "throttled", "sustainable_rate_hz", "latency_ms"}


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    calls: list[tuple[Any, ...]] = []

    def fake_open(artifact: Path, profile: Any, threads: int | None) -> SimulatedSession:
        session = SimulatedSession(latency_s=0.002, threads=threads or 4)
        calls.append((artifact, profile.name, threads, session))
        return session

    monkeypatch.setattr(cli_profile, "_open_session", fake_open)
    return calls


def invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, ["profile", *args])


def sensors(root: Path, watts: float = 3.0, temp_c: float = 45.0) -> Path:
    files = {"sys/class/hwmon/hwmon0/name": "board", "sys/class/hwmon/hwmon0/power1_input": int(watts * 1e6),
             "sys/class/thermal/thermal_zone0/type": "cpu-thermal",
             "sys/class/thermal/thermal_zone0/temp": int(temp_c * 1000)}
    for rel, value in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(f"{value}\n")
    return root


def test_json_has_every_field_and_the_session_is_opened_inside_the_command(
        tmp_path: Path, opened: list[tuple[Any, ...]]) -> None:
    root = sensors(tmp_path / "sys-root")
    result = invoke("model.tflite", "-p", "raspberry-pi-5", "--duration", "0.6", "--idle", "0.3", "--rate", "20",
                    "--threads", "2", "--sysfs-root", str(root), "--vcgencmd", "/nonexistent", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert JSON_KEYS <= set(data)
    assert opened[0][:3] == (Path("model.tflite"), "raspberry-pi-5", 2) and opened[0][3].closed
    assert data["artifact"] == "model.tflite" and data["threads"] == 2
    assert data["power_source"] == "hwmon" and data["estimated"] is False
    assert data["idle_power_w"] == pytest.approx(3.0) and data["avg_power_w"] == pytest.approx(3.0)
    e = data["energy_mj_per_inference"]
    assert e["total"] == pytest.approx(3.0 * 1000 / data["rate_hz"], rel=1e-3)  # 3 W / rate
    assert e["above_idle"] == pytest.approx(0.0, abs=1e-6)  # a flat meter: nothing above idle
    assert data["temp_c"] == {"idle": 45.0, "start": 45.0, "max": 45.0, "end": 45.0, "max_at_s": pytest.approx(0, abs=1)}
    assert data["thermal_budget_c"] == 80.0  # the profile's throttle temperature
    # Issue 27: nothing said that an x86 host is not the Pi the profile describes.
    import platform

    host = data["host"]
    assert host["profile_arch"] == "aarch64"
    if platform.machine() in ("x86_64", "AMD64"):
        assert host["is_the_profiled_device"] is False and "this host is x86_64, raspberry-pi-5 is aarch64" in host["note"]
    text = invoke("model.tflite", "-p", "raspberry-pi-5", "--duration", "0.3", "--idle", "0.1", "--sysfs-root", str(root),
                  "--vcgencmd", "/nonexistent")
    assert (host.get("note") or "") in text.stdout
    assert data["sustainable_rate_hz"] is None and "no thermal model" in data["sustainable_rate"]["reason"]
    assert data["latency_ms"]["p50"] > 0 and data["sampler"]["samples"] > 5


def test_this_kind_of_machine_gets_the_marked_estimate_and_reasons(tmp_path: Path, opened: list[Any]) -> None:
    # What a VM without powercap, hwmon or thermal zones looks like (this build machine).
    empty = tmp_path / "empty"
    empty.mkdir()
    result = invoke("m.tflite", "-p", "host", "--duration", "0.5", "--idle", "0.2", "--sysfs-root", str(empty),
                    "--vcgencmd", "/nonexistent", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["power_source"] == "estimate" and data["estimated"] is True
    assert data["idle_power_w"] == pytest.approx(10.0)  # host.toml idle_w, exactly: the model, not a meter
    tried = {t["name"]: (t["status"], t["reason"]) for t in data["power_sources_tried"]}
    assert tried["rapl"] == ("unavailable", "no RAPL zones (/sys/class/powercap/intel-rapl:N missing)")
    assert tried["hwmon"][0] == "unavailable" and tried["estimate"][0] == "used"
    assert data["temp_c"] is None
    assert data["temp_reason"] == "no thermal zones (/sys/class/thermal/thermal_zone*/type missing)"
    human = invoke("m.tflite", "-p", "host", "--duration", "0.3", "--idle", "0", "--sysfs-root", str(empty),
                   "--vcgencmd", "/nonexistent")
    assert human.exit_code == 0
    assert "estimate (ESTIMATED from the profile, not measured)" in human.stdout
    assert "temperature      null: no thermal zones" in human.stdout


def test_no_source_is_null_not_zero(tmp_path: Path, opened: list[Any]) -> None:
    result = invoke("m.tflite", "-p", "host", "--duration", "0.3", "--idle", "0.1", "--power-source", "rapl",
                    "--sysfs-root", str(tmp_path), "--json")
    data = json.loads(result.stdout)
    assert result.exit_code == 0
    assert data["energy_mj_per_inference"] is None and data["avg_power_w"] is None
    assert data["energy_reason"] == "no power source: rapl: no RAPL zones (/sys/class/powercap/intel-rapl:N missing)"


def test_user_errors_are_one_line_exit_1_and_usage_errors_exit_2(tmp_path: Path, opened: list[Any]) -> None:
    bad = invoke("m.tflite", "-p", "host", "--power-source", "rapel", "--sysfs-root", str(tmp_path))
    assert bad.exit_code == 1
    assert bad.stderr.strip().splitlines() == [
        ('error: unknown power source "rapel". Did you mean "rapl"? Known: auto, jetson-ina3221, jetson-ina238, '
         "vcgencmd-pmic, rapl, hwmon, external, estimate")]
    profile = invoke("m.tflite", "-p", "raspbery-pi-5")
    assert profile.exit_code == 1 and 'Did you mean "raspberry-pi-5"?' in profile.stderr
    assert invoke("m.tflite").exit_code == 2  # -p is required
    assert invoke("m.tflite", "-p", "host", "--duration", "0").exit_code == 2
    assert invoke("m.tflite", "-p", "host", "--report", str(tmp_path / "r.pdf")).exit_code == 2
    assert not opened  # nothing was opened for any of them


def test_reports_html_and_markdown_with_plots(tmp_path: Path, opened: list[Any]) -> None:
    root = sensors(tmp_path / "root")
    html = tmp_path / "out" / "report.html"
    result = invoke("m.tflite", "-p", "raspberry-pi-5", "--duration", "0.4", "--idle", "0.2", "--sysfs-root",
                    str(root), "--vcgencmd", "/nonexistent", "--report", str(html), "--json")
    assert result.exit_code == 0, result.output
    text = html.read_text()
    png = base64.b64decode(text.split("data:image/png;base64,")[1].split("'")[0])
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    assert "energy / inference (total)" in text and json.loads(result.stdout)["report"] == [str(html)]
    md = tmp_path / "out" / "report.md"
    result = invoke("m.tflite", "-p", "raspberry-pi-5", "--duration", "0.3", "--idle", "0.1", "--sysfs-root",
                    str(root), "--vcgencmd", "/nonexistent", "--report", str(md))
    assert result.exit_code == 0, result.output
    assert "![power, temperature, latency](report.png)" in md.read_text()
    assert (tmp_path / "out" / "report.png").read_bytes().startswith(b"\x89PNG")


def test_missing_matplotlib_says_how_to_install_it(tmp_path: Path, opened: list[Any],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now raises ImportError
    result = invoke("m.tflite", "-p", "host", "--report", str(tmp_path / "r.html"))
    assert result.exit_code == 1 and not opened  # before a minute of measuring, not after
    assert result.stderr.strip() == ("error: matplotlib is needed for the --report plots but is not installed. "
                                     "Fix: pip install 'edgeserve[report]'")


def test_importing_the_cli_does_not_import_the_profiling_package() -> None:
    code = "import sys, edgeserve.cli; print(sorted(m for m in sys.modules if m.startswith('edgeserve.profiling')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_thermal_budget_options_wrap_a_serving_loop_in_a_governor(tmp_path: Path) -> None:
    """What `edgeserve run --thermal-budget` does with the two helpers."""
    import click

    from edgeserve.profiling.plant import PlantParams, SimulatedPlant

    SimulatedPlant(tmp_path, PlantParams(t_amb_c=25.0, idle_w=1.0))  # a zone at 33 °C
    seen: dict[str, Any] = {}

    @click.command()
    @cli_profile.thermal_budget_options
    def serve(thermal_budget: float | None, governor_policy: str, sysfs_root: Path | None) -> None:
        session = SimulatedSession(latency_s=0.001)
        gov = cli_profile.governor_for(session, None, thermal_budget, governor_policy, sysfs_root)
        runner = gov or session
        for _ in range(20):
            runner.run(None)
        seen["governor"] = gov
        if gov is not None:
            gov.close()

    result = CliRunner().invoke(serve, ["--thermal-budget", "70", "--governor", "threads",
                                        "--sysfs-root", str(tmp_path)])
    assert result.exit_code == 0, result.output
    gov = seen["governor"]
    assert gov.policy == "threads" and gov.budget_c == 70.0 and gov.stats()["inferences"] == 20
    assert CliRunner().invoke(serve, []).exit_code == 0 and seen["governor"] is None
    assert CliRunner().invoke(serve, ["--governor", "slow"]).exit_code == 2
