"""The shape of the house: no module past 800 lines, no import cycle between modules, and the
report's lines for each target in the target's own folder (issue 49).

The import graph is read statically with ``ast`` from every import statement anywhere in a
module, including imports inside functions and under ``if TYPE_CHECKING:``: a lazy import
still ties the two modules together, and a cycle through one is a cycle a reader has to
hold in mind. An edge goes to the most specific project module named (``from a.b import c``
is an edge to ``a.b.c`` when that is a module, else to ``a.b``). A package's ``__init__``
that imports its own submodules (to register a target, or re-export names) is not part of
a cycle with them: importing ``a.b.c`` runs ``a.b``'s ``__init__`` by Python's rules, not
because ``c`` asked for it, so edges from a module to its own enclosing packages are left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Folders as installed (pyproject.toml's package-dir): converters/ and runtime/ live inside edgeserve.
PACKAGE_DIRS = {"edgeserve": ROOT / "edgeserve", "edgeserve.converters": ROOT / "converters",
                "edgeserve.runtime": ROOT / "runtime", "edgeserve._profiles": ROOT / "profiles",
                "edgeserve._firmware": ROOT / "firmware"}
MAX_LINES = 800


def project_modules() -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for package, folder in PACKAGE_DIRS.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join([package, *parts])] = path
    return modules


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    is_package = path.name == "__init__.py"
    edges: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                       for alias in node.names]
        for target in targets:
            while target and target not in modules:  # a name inside a module: the module
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(target + "."):
                edges.add(target)
    return edges


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_no_module_is_over_800_lines() -> None:
    sizes = {p.relative_to(ROOT).as_posix(): len(p.read_text().splitlines()) for p in project_modules().values()}
    too_long = {p: n for p, n in sizes.items() if n > MAX_LINES}
    assert not too_long, f"over {MAX_LINES} lines: {too_long}"
    assert len(sizes) > 50  # the walk found the project, not an empty folder


def test_imports_form_no_cycle() -> None:
    modules = project_modules()
    graph = {name: imports_of(name, path, modules) for name, path in modules.items()}
    assert sum(len(e) for e in graph.values()) > 100  # the graph is the real one
    cycles = find_cycles(graph)
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_finder_finds_cycles() -> None:
    """The check can fail: a known three-module cycle and a lazy import are found."""
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []
    modules = {"edgeserve.x": ROOT / "x.py", "edgeserve.y": ROOT / "y.py"}
    tree = "def f():\n    from edgeserve.y import thing\n"
    path = Path(__file__).parent / "_house_probe.py"
    try:
        path.write_text(tree)
        assert imports_of("edgeserve.x", path, modules) == {"edgeserve.y"}
    finally:
        path.unlink()


def target_tests_in(path: Path) -> set[str]:
    """The registered target names ``path`` compares an entry's "target" with (``entry["target"]
    == "mcu"``, ``... in ("onnx", "onnx-int8")``): knowledge of a target outside its folder."""
    from edgeserve.converters import target_names

    names = set(target_names())
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        if not any(isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant) and n.slice.value == "target"
                   for n in sides):
            continue
        for side in sides:
            for constant in ast.walk(side):
                if isinstance(constant, ast.Constant) and constant.value in names:
                    found.add(constant.value)
    return found


def test_the_report_collects_each_targets_lines_from_its_folder() -> None:
    """edgeserve/cli/report.py tests no entry for a target name: each converter with lines of its own
    points at its module (report_lines), which is in the converter's own folder and has print_entry."""
    import importlib

    from edgeserve.converters import get_converter, target_names

    assert target_tests_in(ROOT / "edgeserve" / "cli" / "report.py") == set()
    own = {}
    for name in target_names():
        module = get_converter(name).report_lines
        if module is not None:
            folder = type(get_converter(name)).__module__.rsplit(".", 1)[0]
            assert module.startswith(folder + "."), (name, module)
            assert callable(importlib.import_module(module).print_entry)
            own[name] = module
    assert set(own) == set(target_names())  # every target prints its own lines, tflite-int8 too


def test_the_target_test_finder_finds_them() -> None:
    """The check above can fail: the dispatch report.py had before is caught."""
    path = Path(__file__).parent / "_house_names_probe.py"
    try:
        path.write_text('if entry["target"] == "mcu-c":\n    pass\nif entry["target"] in ("onnx", "onnx-int8"):\n'
                        '    pass\nif info["kind"] == "coreml":\n    pass\n')
        assert target_tests_in(path) == {"mcu-c", "onnx", "onnx-int8"}
    finally:
        path.unlink()


# Target folders (converters/<folder>/, one per target or pair of targets) and what one of them
# may still take from another, with why. Everything both microcontroller targets need is in
# converters/microcontroller/; what every target's check needs in edgeserve/quality/ and
# converters/scoring.py.
TARGET_FOLDERS = ("tflite_int8", "tflm", "mcu_c", "coreml", "onnx", "executorch")
ALLOWED_BETWEEN_TARGETS = {
    # mcu's rewrites for TFLM's kernels (int8 islands, lookup tables) are judged by tflite-int8's
    # own gate run (LiteRT on the rewritten model against the source), not a copy of it.
    ("edgeserve.converters.tflm.converter", "edgeserve.converters.tflite_int8.converter"),
}


def imports_between_targets(modules: dict[str, Path]) -> set[tuple[str, str]]:
    def folder(module: str) -> str | None:
        parts = module.split(".")
        return parts[2] if len(parts) > 2 and parts[:2] == ["edgeserve", "converters"] and parts[2] in TARGET_FOLDERS \
            else None

    return {(name, target) for name, path in modules.items() if folder(name)
            for target in imports_of(name, path, modules) if folder(target) not in (None, folder(name))}


def test_no_target_imports_another() -> None:
    """Issue 49: a target's folder imports no other target's folder (beyond the one listed
    exception); what two targets share lives in a shared place both import."""
    modules = project_modules()
    assert imports_between_targets(modules) == ALLOWED_BETWEEN_TARGETS


def test_an_import_between_targets_is_found(tmp_path: Path) -> None:
    """The check above can fail: a module of mcu_c importing the TFLM target's converter is found."""
    module = tmp_path / "leaning.py"
    module.write_text("from edgeserve.converters.tflm.converter import McuConverter\n")
    modules = project_modules() | {"edgeserve.converters.mcu_c.leaning": module}
    assert ("edgeserve.converters.mcu_c.leaning", "edgeserve.converters.tflm.converter") in \
        imports_between_targets(modules)


def test_each_target_says_its_own_route() -> None:
    """Issue 49: `inspect SOURCE`'s matrix is collected from the converters (route_from), one route
    per target for every source kind; none falls back to the base class's "no route"."""
    from edgeserve.converters import get_converter, target_names
    from edgeserve.converters._base import Converter
    from edgeserve.inspect import routes_for
    from edgeserve.routes import SOURCE_KINDS

    names = target_names()
    for name in names:
        assert type(get_converter(name)).route_from is not Converter.route_from, name
    for kind in SOURCE_KINDS:
        routes = routes_for(kind)
        assert sorted(r.target for r in routes) == sorted(names)
        assert all(r.exists or r.reason for r in routes), kind
    assert [r.target for r in routes_for("onnx")][:3] == ["tflite-int8", "mcu", "mcu-c"]  # the README's order


def option_reads_by_key(path: Path) -> list[int]:
    """Lines of ``path`` that read a convert option by its string key (``options.get("x")``,
    ``ctx.options["x"]``, ``self.options.get(...)``) outside a ``from_mapping`` (the one place a
    target's typed options are made from the flags). A TFLite operator's own ``op.options`` is
    not a convert option and is left alone."""
    tree = ast.parse(path.read_text())
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}

    def in_from_mapping(node: ast.AST) -> bool:
        while node in parents:
            node = parents[node]
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "from_mapping":
                return True
        return False

    def is_options(value: ast.AST) -> bool:
        if isinstance(value, ast.Name):
            return value.id == "options"
        if isinstance(value, ast.Attribute):
            return value.attr == "options" and isinstance(value.value, ast.Name) and value.value.id in ("ctx", "self")
        return isinstance(value, ast.BoolOp) and any(is_options(v) for v in value.values)

    found = []
    for node in ast.walk(tree):
        read = (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                and is_options(node.func.value)) or \
            (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and is_options(node.value)
             and isinstance(node.slice, ast.Constant))
        if read and not in_from_mapping(node):
            found.append(node.lineno)
    return found


def test_targets_read_their_options_only_through_typed_options() -> None:
    """Issue 49: a target reads the convert flags once, into its typed options (each target's
    ``Options.from_mapping``, the gate's ``GateOptions``), never by string key in its code; so
    does the quality gate that every target calls."""
    folders = (ROOT / "converters", ROOT / "edgeserve" / "quality")
    found = {str(path.relative_to(ROOT)): lines for folder in folders for path in sorted(folder.rglob("*.py"))
             if (lines := option_reads_by_key(path))}
    assert found == {}


def test_an_option_read_by_key_is_found(tmp_path: Path) -> None:
    """The check above can fail: reads by key outside from_mapping are found, those inside it and
    a TFLite operator's options are not."""
    module = tmp_path / "target.py"
    module.write_text("class Options:\n"
                      "    @classmethod\n"
                      "    def from_mapping(cls, options):\n"
                      "        return options.get('name')\n"
                      "def convert(ctx, op):\n"
                      "    axis = op.options.get('axis')\n"
                      "    return ctx.options.get('metric'), (ctx.options or {}).get('output'), ctx.options['name']\n")
    assert option_reads_by_key(module) == [7, 7, 7]


# Target names that name something else too outside converters/: an engine, a file kind and a
# framework (coreml, onnx, executorch); and a kind of device profile, `kind = "mcu"`.
NAMES_SHARED_WITH_ENGINES = {"coreml", "onnx", "executorch"}
TARGET_NAMES_ALLOWED_OUTSIDE = {("edgeserve/device_profiles.py", "mcu")}


def target_names_in(path: Path) -> set[str]:
    """The registered target names ``path``'s code holds as a string of their own (not in a
    docstring or message): a place that knows about a target outside its folder."""
    from edgeserve.converters import target_names

    names = set(target_names()) - NAMES_SHARED_WITH_ENGINES
    return {node.value for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Constant) and node.value in names}


def test_no_target_is_named_outside_the_converters() -> None:
    """Issue 49: the runtime, inspect and the CLI ask a converter (``served_by_runtime``,
    ``check_operators``, ``report_lines``) instead of listing targets by name."""
    found = {(str(path.relative_to(ROOT)), name) for folder in (ROOT / "edgeserve", ROOT / "runtime")
             for path in sorted(folder.rglob("*.py")) for name in target_names_in(path)}
    assert found == TARGET_NAMES_ALLOWED_OUTSIDE


def test_a_target_named_outside_the_converters_is_found(tmp_path: Path) -> None:
    """The check above can fail: the lists runtime/artifacts.py and inspect.py had are found; a
    docstring that mentions a target is not."""
    module = tmp_path / "knowing.py"
    module.write_text('"""Serves tflite-int8."""\n_NOT_SERVED = {"mcu", "mcu-c"}\n'
                      'if route.target == "tflite-int8":\n    pass\n')
    assert target_names_in(module) == {"mcu", "mcu-c", "tflite-int8"}


def state_kept_on_self(path: Path) -> list[int]:
    """Lines of ``path`` that assign an attribute of ``self``: a converter holding one run's state
    (saved and restored around a fallback route, as tflite-int8's six fields once were)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
        found |= {node.lineno for t in targets for a in ast.walk(t)
                  if isinstance(a, ast.Attribute) and isinstance(a.value, ast.Name) and a.value.id == "self"}
    return sorted(found)


def test_no_converter_keeps_a_runs_state_on_itself() -> None:
    """Issue 49: what a conversion learns as it goes is handed from step to step (tflite-int8's
    run.py), never kept on the converter object."""
    found = {str(path.relative_to(ROOT)): lines for path in sorted((ROOT / "converters").glob("*/converter.py"))
             if (lines := state_kept_on_self(path))}
    assert found == {}


def test_state_kept_on_self_is_found(tmp_path: Path) -> None:
    module = tmp_path / "converter.py"
    module.write_text("class C:\n    def convert(self, ctx):\n        self._floated = 1\n"
                      "        self._record: dict = {}\n        self.count += 1\n        (self._a, self._b) = (1, 2)\n"
                      "        local = self.name\n")
    assert state_kept_on_self(module) == [3, 4, 5, 6]
