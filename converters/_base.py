"""The shape every target shares: prepare → calibrate → emit → verify, and re-verification."""

from __future__ import annotations

import abc
import dataclasses
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import numpy as np

from edgeserve.console import Progress
from edgeserve.datasets import SampleSet
from edgeserve.preprocess import PreprocessSpec
from edgeserve.sources import SourceModel

T = TypeVar("T")
_LOCKS_LOCK = threading.Lock()


@dataclasses.dataclass
class ConversionContext:
    """Everything a converter gets: loaded once by the pipeline, shared by all targets.

    Attributes:
        evaluation: the eval set, or the calibration set when no eval set was given
            (``evaluation.labels`` is then None and metrics compare against the float model).
        options: target-specific options by name (each converter reads its own keys).
        workdir: a temporary directory that lives for the whole conversion.
    """

    source: SourceModel
    out_dir: Path
    calibration: SampleSet | None  # None for a .tflite source: it is already quantized
    evaluation: SampleSet | None
    preprocess: PreprocessSpec | None
    profile: Any  # edgeserve.device_profiles.Profile | None
    options: Mapping[str, Any]
    progress: Progress
    workdir: Path
    artifacts: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)  # target -> entry, this run
    shared: dict[str, Any] = dataclasses.field(default_factory=dict)  # work one target does for others
    # One lock per piece of shared work: targets run side by side (--jobs) each get a copy of
    # this context with a workdir of their own, and these two dicts are the same in every copy.
    _locks: dict[str, threading.Lock] = dataclasses.field(default_factory=dict)
    shared_workdir: Path | None = None  # the conversion's own scratch folder (a target's workdir is in it)

    def once(self, key: str, make: Callable[[], T]) -> T:
        """``make()``'s value, made by the first target that asks; one that asks meanwhile waits
        for it rather than doing the same work beside it. A failed ``make`` is tried again by
        the next target that asks."""
        with _LOCKS_LOCK:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            if key not in self.shared:
                self.shared[key] = make()
            return self.shared[key]

    def for_target(self, name: str) -> "ConversionContext":
        """This context with a scratch folder of the target's own (targets side by side must not
        write the same scratch file); what is shared stays shared."""
        root = self.shared_workdir or self.workdir
        workdir = root / name
        workdir.mkdir(exist_ok=True)
        return dataclasses.replace(self, workdir=workdir, shared_workdir=root)

    def batch1_saved_model(self) -> Path:
        """The TensorFlow source as a batch-1 SavedModel (the TensorFlow converter and tf2onnx
        both start from it), exported once for every target."""
        def export() -> Path:
            from edgeserve.console import capture_native_stderr

            directory = (self.shared_workdir or self.workdir) / "batch1_saved_model"
            with self.progress.step("export batch-1 SavedModel"), capture_native_stderr():
                self.source.export_batch1_saved_model(directory)
            return directory

        return self.once("batch1_saved_model", export)

    def reference_outputs(self) -> list[np.ndarray]:
        """The float source's outputs on ``evaluation`` (computed once, shared by targets)."""
        assert self.evaluation is not None, "a .tflite source has no float reference"
        evaluation = self.evaluation
        return self.once("reference_outputs", lambda: self.source.predict(list(evaluation.inputs)))

    def mixed_range_outputs(self) -> dict[int, dict[str, Any]]:
        """Source outputs whose float values join ranges one int8 scale cannot hold
        (edgeserve.quality.gate.mixed_range_outputs), found once before any target quantizes; a
        classifier's first output is judged by its top-1, not by its ranges, and is skipped."""
        return self.once("mixed_range_outputs", self._find_mixed_range_outputs)

    def _find_mixed_range_outputs(self) -> dict[int, dict[str, Any]]:
        from edgeserve.quality.gate import mixed_range_outputs
        from edgeserve.quality.options import GateOptions
        from edgeserve.quality.metrics import choose_metric

        reference = self.reference_outputs()
        assert self.evaluation is not None
        metric = choose_metric(GateOptions.from_mapping(self.options).metric, self.evaluation.labels, reference[0])
        return mixed_range_outputs(reference, [t.name for t in self.source.signature.outputs],
                                   skip_first=metric == "top1")


@dataclasses.dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


@dataclasses.dataclass(frozen=True)
class VerifyResult:
    """Re-verification of one manifest entry; truthy when every check passed."""

    target: str
    path: str
    checks: tuple[Check, ...]

    def __bool__(self) -> bool:
        return all(c.ok for c in self.checks)

    def __str__(self) -> str:
        head = f"{self.target} {self.path}: {'ok' if self else 'FAILED'}"
        return "\n".join([head] + [f"  [{'ok' if c.ok else 'FAIL'}] {c.name}: {c.detail}" for c in self.checks])

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "path": self.path, "ok": bool(self),
                "checks": [dataclasses.asdict(c) for c in self.checks]}


class Converter(abc.ABC):
    """One conversion target. Subclasses register with ``@register`` and set ``name``."""

    name: ClassVar[str]
    summary: ClassVar[str]
    # The module whose print_entry(console, entry) prints this target's manifest entry for
    # `convert` and `inspect` (edgeserve.cli.report collects it); None: the lines every target shares.
    report_lines: ClassVar[str | None] = None
    # Where `inspect SOURCE` lists this target's route: the order of the README's matrix.
    route_order: ClassVar[int] = 100
    # Whether edgeserve's runtime (`run`, `bench`, Session) opens this target's artifact; False for
    # C built for a board, whose figures come from the emulated board instead.
    served_by_runtime: ClassVar[bool] = True

    def route_from(self, kind: str, control_flow: bool = False) -> Any:
        """The tools that take a source of ``kind`` (edgeserve.routes.SOURCE_KINDS) to this target,
        as an edgeserve.routes.Route, or why none does. ``control_flow``: a .tflite with IF/WHILE
        or subgraphs other than CALL_ONCE initialisers."""
        from edgeserve.routes import Route

        return Route(self.name, (), "this target describes no route")

    def requires(self, source_kind: str) -> tuple[str, ...]:
        """Targets whose artifacts this one is built from, for a source of ``source_kind``."""
        return ()

    def uses_calibration(self, options: Mapping[str, Any]) -> bool:
        """Whether calibration data sets this target's numbers (int8 ranges), for ``options``.

        A target that only scores against the evaluation set says False, so the pipeline
        does not warn about random calibration data that nothing quantizes with.
        """
        return True

    def isolated_imports(self, source_kind: str) -> tuple[str, ...]:
        """The frameworks this target's isolated steps import, for a source of ``source_kind``.
        The fork server (edgeserve.isolation.warm) imports them while the model loads; a hint
        for speed only: a step whose framework is not named imports it in its own child."""
        return ()

    def check_operators(self, model: Any) -> None:
        """Raise this target's refusal (an EdgeServeError) when it cannot take a full-integer
        .tflite ``model`` (edgeserve.tflite.model.TfliteModel), so `inspect` says what `convert`
        would. Only checks that are pure Python and take milliseconds belong here."""

    def check_request(self, options: Mapping[str, Any], profile: Any) -> None:
        """Refuse options this target cannot honour (InputError), before any model is loaded
        or file written: a bad flag costs the user a second, not a conversion."""

    @abc.abstractmethod
    def convert(self, ctx: ConversionContext) -> dict[str, Any]:
        """Run prepare → calibrate → emit → verify and return the manifest entry.

        The entry has ``status`` "ok" or "failed"; a failed entry is still written so the
        user can see every attempt, and the pipeline turns it into a non-zero exit.
        """

    @abc.abstractmethod
    def reverify(self, entry: Mapping[str, Any], root: Path) -> VerifyResult:
        """Re-check a written artifact against what its manifest entry recorded."""
