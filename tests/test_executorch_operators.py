"""`bench --operators` on a .pte: each operator's time from ExecuTorch's own event tracer (ETDump),
as Qualcomm AI Hub's profile jobs report each layer's time and compute unit.

Checked against what is known independently of the profile: the kernels the conversion recorded
as left outside XNNPACK (get_delegation_info at lowering) are the profile's "portable" rows, and
the operators' time adds up to no more than the wall time of the runs that were traced, nor to a
small part of it (ticks read as nanoseconds: a wrong unit is off by a thousand)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("executorch")
torch = pytest.importorskip("torch")


class _ConvUpCumsum(torch.nn.Module):
    """Convolutions XNNPACK takes, and a cumulative sum it has no operator for (a portable kernel)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Conv2d(3, 32, 3, padding=1)
        self.b = torch.nn.Conv2d(32, 32, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.b(torch.relu(self.a(x)))
        return torch.cumsum(y, dim=3)


@pytest.fixture(scope="module")
def pte(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, np.ndarray]:
    from edgeserve.converters.executorch import lower

    folder = tmp_path_factory.mktemp("executorch_operators")
    torch.manual_seed(0)
    net = _ConvUpCumsum().eval()
    x = np.random.default_rng(0).normal(size=(1, 3, 64, 64)).astype(np.float32)
    torch.export.save(torch.export.export(net, (torch.from_numpy(x),)), folder / "net.pt2")
    built = lower.build(str(folder / "net.pt2"), "fp32", None, str(folder / "net.pte"), [x])
    return folder / "net.pte", built, x


def test_each_operator_is_timed_and_placed_where_the_lowering_put_it(pte) -> None:
    from edgeserve.runtime.backends.executorch import ExecutorchBackend
    from edgeserve.runtime.measure.operators import operator_profile

    path, built, x = pte
    assert built["portable_ops"], "the model must leave a kernel outside XNNPACK for this test to mean anything"

    class OneFrame:  # what operator_profile asks of a Session
        backend = "executorch:xnnpack"

        def __init__(self) -> None:
            self.engine = ExecutorchBackend("executorch:xnnpack", str(path))

        def operator_times(self, frame: np.ndarray, runs: int) -> list[dict]:
            self.engine.input_buffer(0)[...] = frame
            return self.engine.operator_times(runs)

    profile = operator_profile(OneFrame(), x, runs=5)
    places = {g["op"]: g["placed_on"] for g in profile["by_op"]}
    portable = {op.split(".")[0] for op, where in places.items() if where == "portable"}
    recorded = set(built["portable_ops"])
    # aten_cumsum_default at lowering is the kernel call cumsum.out at run time
    assert all(any(r.startswith(f"aten_{p}") for r in recorded) for p in portable) and portable
    assert all(any(r.startswith(f"aten_{p}") for p in portable) for r in recorded)
    assert sum(1 for op in places if "Convolution" in op) >= 1 and set(places.values()) == {"XNNPACK", "portable"}
    assert abs(sum(g["share"] for g in profile["by_op"]) - 1.0) < 0.01
    assert profile["nodes"] == sum(g["nodes"] for g in profile["by_op"]) >= 3


def test_the_times_are_nanoseconds_that_add_up_to_the_runs(pte, tmp_path: Path) -> None:
    from executorch.devtools.etdump.serialize import deserialize_from_etdump_flatcc
    from executorch.runtime import Runtime

    from edgeserve.runtime.backends.executorch_profile import operator_times

    path, _, x = pte
    program = Runtime.get().load_program(str(path), enable_etdump=True)
    method = program.load_method("forward")
    inputs = [torch.from_numpy(x)]
    method.execute(inputs)  # not timed: the first run allocates
    runs = 10
    started = time.perf_counter()
    for _ in range(runs):
        method.execute(inputs)
    wall_us = (time.perf_counter() - started) / runs * 1e6
    program.write_etdump_result_to_file(str(tmp_path / "run.etdp"), str(tmp_path / "debug.bin"))
    nodes = operator_times(deserialize_from_etdump_flatcc((tmp_path / "run.etdp").read_bytes()))
    # The dump holds the untimed first run too: the mean is over 11 runs, close to the timed ten.
    total = sum(n["us"] for n in nodes)
    assert 0.1 * wall_us < total <= 1.2 * wall_us, (total, wall_us)


def test_a_dump_without_a_run_is_refused_in_words() -> None:
    """The check above can fail: an ETDump with only the program's loading in it has no run to
    average, and says so rather than returning an empty table."""
    from types import SimpleNamespace

    from edgeserve.runtime.backends.executorch_profile import operator_times

    load = SimpleNamespace(profile_event=SimpleNamespace(name="Program::load_method", delegate_debug_id_str=None))
    with pytest.raises(NotImplementedError, match="no run"):
        operator_times(SimpleNamespace(run_data=[SimpleNamespace(events=[load])]))


def test_bench_operators_on_a_pte_from_the_cli(pte, tmp_path: Path) -> None:
    """`edgeserve bench MODEL.pte --operators --json`: the table, not the reason an engine without
    a profiler gives."""
    from click.testing import CliRunner

    from edgeserve.cli import cli

    path, _, _ = pte
    result = CliRunner().invoke(cli, ["bench", str(path), "--frames", "5", "--warmup", "1", "--operators", "--json"])
    assert result.exit_code == 0, result.output
    ops = json.loads(result.output)["operators"]
    assert "reason" not in ops and ops["us_per_run"] > 0
    assert {g["placed_on"] for g in ops["by_op"]} == {"XNNPACK", "portable"}
