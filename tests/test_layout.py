"""The layout rules of docs/ARCHITECTURE.md, checked on the source so a change that breaks one fails here.

Each rule is one small test: the engine's subsystem packages, the import direction of the layers, no import
cycles, no torch in the engine's bookkeeping, no private names across modules, Streamlit only in the app layer,
and no reference to a file outside the repository.
Files and functions are split where they hold two concepts, never to meet a line count, and `ruff format`
decides line breaks, so no rule here counts lines or files.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ("engine", "kernels", "lessons", "ui", "pages", "progress", "kvlab")
# Which top-level packages each layer may import (imports only point down). kvlab/ (the `kvlab` command) sits
# on top; its settings module is the one exception every layer may import (SETTINGS, below).
ALLOWED_IMPORTS = {
    "kernels": {"kernels"},
    "engine": {"engine", "kernels"},
    "lessons": {"lessons", "engine", "kernels"},
    "progress": {"progress"},
    "ui": {"ui", "lessons", "engine", "kernels", "progress"},
    "pages": {"ui", "lessons", "engine", "kernels", "progress"},
    "kvlab": {"kvlab", "ui", "lessons", "engine", "kernels", "progress"},
}
# Every KVLAB_* setting is parsed in this one module (checked at the server's start); it imports nothing of the
# project, so any layer may use its parse functions (and the package's version) without an import pointing up.
SETTINGS = "kvlab.settings"
PROJECT_PACKAGES = set(LIBRARY) | {"bench", "tests", "scripts"}
# The packages an import cycle can run through (pages/ and tests/ import them, nothing imports those).
IMPORTABLE = ("engine", "kernels", "lessons", "ui", "progress", "bench", "kvlab")
ENGINE_SUBSYSTEMS = ("core", "model", "attention", "memory", "worker")
# Modules that must load without torch, even through what they import (the package face runs first).
TORCH_FREE = ("engine.core", "engine.sampling_params", "engine.memory")


def _tracked(*patterns: str) -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", *patterns],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [ROOT / line for line in out.splitlines() if (ROOT / line).is_file()]


def _modules(*packages: str) -> list[Path]:
    return [p for p in _tracked("*.py") if p.relative_to(ROOT).parts[0] in packages]


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _imports(tree: ast.AST) -> list[tuple[str, list[str]]]:
    """(module, imported names) for every absolute import in a module."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            found.extend((a.name, []) for a in node.names)
    return found


def _module_name(path: Path, root: Path = ROOT) -> str:
    """The dotted name a file is imported as: engine/memory/__init__.py -> engine.memory."""
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _run_time_imports(tree: ast.AST, module: str, is_package: bool) -> list[tuple[str, list[str]]]:
    """(module, imported names) for every import a module can execute: at module level, in functions and classes,
    relative ones resolved; only the body of an `if TYPE_CHECKING:` block is skipped (it never runs)."""
    package = module if is_package else module.rpartition(".")[0]
    found: list[tuple[str, list[str]]] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            found.extend((a.name, []) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            found.append((base, [a.name for a in node.names]))
        stack.extend(ast.iter_child_nodes(node))
    return found


def _import_graph(packages: tuple[str, ...] = IMPORTABLE, root: Path = ROOT) -> dict[str, set[str]]:
    """module -> the project modules importing it runs (the repository's tracked files, or every file under
    another `root`).

    `from pkg import name` is an edge to pkg.name when that is a module, else to pkg; `import a.b` an edge to
    a.b. Importing a.b.c also runs the __init__ of a and a.b first, so those are edges too, except for the
    importer's own packages (they are already running when it does)."""
    files = _modules(*packages) if root == ROOT else [p for pkg in packages for p in (root / pkg).rglob("*.py")]
    paths = {_module_name(p, root): p for p in files}
    graph: dict[str, set[str]] = {name: set() for name in paths}
    for name, path in paths.items():
        tree = ast.parse(path.read_text())
        for module, names in _run_time_imports(tree, name, path.name == "__init__.py"):
            targets = [f"{module}.{n}" if f"{module}.{n}" in paths else module for n in names] or [module]
            for target in targets:
                parts = target.split(".")
                ancestors = [".".join(parts[:i]) for i in range(1, len(parts))]
                runs = [a for a in ancestors if name != a and not name.startswith(a + ".")] + [target]
                graph[name] |= {t for t in runs if t in paths}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Import cycles as paths [a, b, ..., a]: in each strongly connected component, the shortest cycle through
    each module that no cycle found so far passes, so every module on a cycle appears in one."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: list[str] = []
    components: list[set[str]] = []

    def connect(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        on_stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = on_stack.pop()
                component.add(w)
                if w == v:
                    break
            components.append(component)

    for v in sorted(graph):
        if v not in index:
            connect(v)
    cycles = []
    for component in components:
        covered: set[str] = set()
        for start in sorted(component):
            if start in covered or (len(component) == 1 and start not in graph[start]):
                continue
            parent: dict[str, str] = {}
            frontier, seen = [start], {start}
            while frontier and start not in parent:  # breadth first, back to start: the shortest cycle
                nxt = []
                for v in frontier:
                    for w in sorted(graph[v] & component):
                        if w == start and start not in parent:
                            parent[start] = v
                        elif w not in seen:
                            seen.add(w)
                            parent[w] = v
                            nxt.append(w)
                frontier = nxt
            back, v = [], parent[start]
            while v != start:  # walk the parents back to start, then read the walk forwards
                back.append(v)
                v = parent[v]
            path = [start, *reversed(back), start]
            covered |= set(path)
            cycles.append(path)
    return cycles


def test_engine_subsystems_are_packages():
    for package in ENGINE_SUBSYSTEMS:
        assert (ROOT / "engine" / package / "__init__.py").is_file(), f"engine/{package}/ is not a package"
    execution = [name for name in ("runner", "forward_meta", "kv_cache") if (ROOT / "engine" / f"{name}.py").is_file()]
    assert not execution, f"one step's execution lives in engine/worker/, not at engine/'s top level: {execution}"
    assert {"runner.py", "kv_cache.py"} <= {p.name for p in (ROOT / "engine" / "worker").glob("*.py")}


def test_the_cycle_rule_sees_every_import_that_runs():
    source = (
        "import engine.core.sequence\n"
        "if TYPE_CHECKING:\n    import engine.sim\nelse:\n    import engine.attention\n"
        "def f():\n    from engine.memory import footprint\n"
        "class C:\n    def g(self):\n        from . import catalog\n        from ..core import scheduler\n"
    )
    found = _run_time_imports(ast.parse(source), "engine.memory.units", is_package=False)
    assert sorted(found) == [
        ("engine.attention", []),
        ("engine.core", ["scheduler"]),
        ("engine.core.sequence", []),
        ("engine.memory", ["catalog"]),
        ("engine.memory", ["footprint"]),
    ]
    assert _run_time_imports(ast.parse("from . import x"), "engine.memory", is_package=True) == [
        ("engine.memory", ["x"])
    ]


def test_the_cycle_rule_reports_each_cycle_as_a_path():
    graph = {"a": {"b"}, "b": {"c", "e"}, "c": {"a", "b"}, "d": {"d"}, "e": set(), "f": {"a"}}
    assert sorted(_cycles(graph)) == [["a", "b", "c", "a"], ["d", "d"]]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []

    graph = _import_graph(("engine", "lessons"))
    assert "engine.memory.units" in graph["engine.memory.specs"]  # `from engine.memory import units`: the module
    assert "engine" in graph["lessons.measure"]  # `from engine import LLM`: the package, a name in it
    footprint = graph["engine.memory.footprint"]  # engine.core.sliding_window runs engine/core/__init__ first ...
    assert {"engine.core", "engine.core.sliding_window"} <= footprint and "engine" not in footprint  # ... not engine's


def test_no_import_cycles():
    found = [" -> ".join(cycle) for cycle in _cycles(_import_graph())]
    assert not found, "import cycles (an import inside a function is still an edge):\n" + "\n".join(found)


def _unit_graph(graph: dict[str, set[str]], package: str) -> dict[str, set[str]]:
    """The import graph between `package`'s direct children (sub-packages and modules), each one node:
    engine.core.scheduler -> engine.sampling_params is the edge engine.core -> engine.sampling_params. The
    package face itself (`package`'s __init__) is a node of its own."""

    def unit(module: str) -> str:
        return ".".join(module.split(".")[:2])

    units: dict[str, set[str]] = {}
    for module, targets in graph.items():
        if module == package or module.startswith(package + "."):
            units.setdefault(unit(module), set()).update(
                unit(t) for t in targets if t.startswith(package + ".") and unit(t) != unit(module)
            )
    return units


def test_no_import_cycles_between_the_engines_subsystems():
    found = [" -> ".join(cycle) for cycle in _cycles(_unit_graph(_import_graph(("engine",)), "engine"))]
    assert not found, (
        "engine's sub-packages import each other in a cycle (move what both sides need where both can import it "
        "one way):\n" + "\n".join(found)
    )


def _face_importers(graph: dict[str, set[str]], package: str) -> list[str]:
    """Modules inside `package` that import its package face (`from engine import LLM`)."""
    return sorted(m for m, targets in graph.items() if m.startswith(package + ".") and package in targets)


def test_nothing_inside_the_engine_imports_its_package_face():
    found = _face_importers(_import_graph(("engine",)), "engine")
    assert not found, f"import from the defining module, not from `engine` (its face imports them all): {found}"


def _write_tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_subsystem_rules_see_a_planted_violation(tmp_path):
    # No module cycle, but a sub-package cycle (a.x -> b.y, b.z -> a.w) and a subsystem importing the face.
    _write_tree(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.face import F\n",
            "pkg/face.py": "F = 1\n",
            "pkg/a/__init__.py": "",
            "pkg/a/x.py": "from pkg.b import y\n",
            "pkg/a/w.py": "W = 1\n",
            "pkg/b/__init__.py": "",
            "pkg/b/y.py": "Y = 1\n",
            "pkg/b/z.py": "from pkg.a.w import W\nfrom pkg import F\n",
        },
    )
    graph = _import_graph(("pkg",), root=tmp_path)
    assert _cycles(graph) == []
    assert _cycles(_unit_graph(graph, "pkg")) == [["pkg.a", "pkg.b", "pkg.a"]]
    assert _face_importers(graph, "pkg") == ["pkg.b.z"]
    (tmp_path / "pkg/b/z.py").write_text("W = 2\n")  # the fix: both rules pass
    graph = _import_graph(("pkg",), root=tmp_path)
    assert _cycles(_unit_graph(graph, "pkg")) == [] and _face_importers(graph, "pkg") == []


def _loading(modules: list[str], forbidden: str, root: Path = ROOT) -> list[str]:
    """Those of `modules` whose import (in a fresh interpreter, with `root` first on the path) loads the module
    `forbidden`, directly or through anything it imports, the packages' __init__ files included."""
    script = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        f"    if {forbidden!r} in sys.modules:\n"
        "        print(name)\n"
        "        break\n"
    )
    # One module per interpreter would name every culprit, at a second of start-up each; one interpreter
    # names the first module that loads it, which is what a failure needs.
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=root, capture_output=True, text=True, check=True, env=_env(root)
    )
    return out.stdout.split()


def _env(root: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(root)}


def test_engine_core_loads_no_torch_even_transitively():
    modules = sorted(
        _module_name(p)
        for p in _modules("engine")
        if any(_module_name(p) == m or _module_name(p).startswith(m + ".") for m in TORCH_FREE)
    )
    assert "engine.core.scheduler" in modules and "engine.memory.footprint" in modules
    found = _loading(modules, "torch")
    assert not found, f"importing {found} loads torch (follow its imports; the package face loads lazily)"


def test_the_torch_rule_sees_a_planted_transitive_import(tmp_path):
    # core/a.py imports nothing heavy itself; the package face, which runs first, does.
    _write_tree(
        tmp_path,
        {
            "heavy.py": "H = 1\n",
            "pkg/__init__.py": "from pkg.face import F\n",
            "pkg/face.py": "from heavy import H as F\n",
            "pkg/core/__init__.py": "",
            "pkg/core/a.py": "A = 1\n",
        },
    )
    assert _loading(["pkg.core.a"], "heavy", root=tmp_path) == ["pkg.core.a"]
    _write_tree(tmp_path, {"pkg/__init__.py": ""})  # the fix: a lazy face
    assert _loading(["pkg.core.a"], "heavy", root=tmp_path) == []


def test_engine_core_is_bookkeeping_without_torch():
    found = []
    for path in _modules("engine"):
        if _rel(path).startswith("engine/core/"):
            modules = _run_time_imports(ast.parse(path.read_text()), _module_name(path), path.name == "__init__.py")
            found += [f"{_rel(path)} imports {m}" for m, _ in modules if m.split(".")[0] == "torch"]
    assert not found, f"engine/core/ is pure bookkeeping; the tensors live in engine/worker/: {found}"


def test_pages_folder_holds_only_pages():
    helpers = [p.name for p in (ROOT / "pages").glob("*.py") if p.name.startswith("_")]
    assert not helpers, f"page helpers belong in ui/, not pages/: {helpers}"


@pytest.mark.parametrize("layer", sorted(ALLOWED_IMPORTS))
def test_imports_point_down(layer):
    wrong = []
    for path in _modules(layer):
        for module, names in _imports(ast.parse(path.read_text())):
            top = module.split(".")[0]
            if module == SETTINGS or (module == "kvlab" and set(names) <= {"settings"}):
                continue
            if top in PROJECT_PACKAGES and top not in ALLOWED_IMPORTS[layer]:
                wrong.append(f"{_rel(path)} imports {module}")
    assert not wrong, f"{layer}/ may import only {sorted(ALLOWED_IMPORTS[layer])}: {wrong}"


def test_the_settings_module_imports_nothing_of_the_project():
    graph = _import_graph()
    assert graph[SETTINGS] <= {"kvlab"}, f"{SETTINGS} must stay a leaf every layer may import: {graph[SETTINGS]}"
    assert graph["kvlab"] == set(), "kvlab/__init__.py runs before kvlab.settings: it must import nothing either"


def test_no_private_name_is_imported_across_modules():
    private = []
    for path in _modules(*LIBRARY, "bench"):
        for module, names in _imports(ast.parse(path.read_text())):
            if module.split(".")[0] not in PROJECT_PACKAGES:
                continue
            private += [f"{_rel(path)}: from {module} import {n}" for n in names if n.startswith("_")]
            if any(part.startswith("_") and part != "__init__" for part in module.split(".")):
                private.append(f"{_rel(path)}: imports private module {module}")
    assert not private, f"private names used outside their module: {private}"


def test_streamlit_only_in_the_app_layer():
    pattern = re.compile(r"^\s*(import streamlit|from streamlit)", re.M)
    found = [_rel(p) for p in _modules("engine", "kernels", "lessons", "progress") if pattern.search(p.read_text())]
    assert not found, f"engine/, kernels/, lessons/ and progress/ must not import streamlit: {found}"


def test_the_formatter_shapes_every_line_outside_kernels():
    marker = "fmt: " + "skip"  # spelled in two parts so this file does not match itself
    found = [_rel(p) for p in _tracked("*.py") if _rel(p).split("/")[0] != "kernels" and marker in p.read_text()]
    assert not found, f"'# {marker}' outside kernels/ (let ruff format shape the lines): {found}"


def test_the_project_cites_only_its_own_files():
    outside = re.compile(r"\.\./shared|\b(DESIGN|LESSONS|STYLE)\.md|(?<!docs/)\bBENCHMARKS\.md")
    texts = _tracked("*.py", "*.md", "*.sh", "*.toml", "*.yaml", "*.txt", "Dockerfile")
    found = [_rel(p) for p in texts if p != Path(__file__) and outside.search(p.read_text(errors="replace"))]
    assert not found, f"references to files that are not in the repository: {found}"


def test_docs_links_resolve():
    broken = []
    for path in _tracked("*.md"):
        for target in re.findall(r"\]\(([^)#\s]+)", path.read_text()):
            if "://" not in target and not (path.parent / target).exists():
                broken.append(f"{_rel(path)} -> {target}")
    assert not broken, f"broken relative links: {broken}"
