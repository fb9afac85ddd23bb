"""engine/memory/__init__.py: the memory model's public names, and every name the project imports from it."""

import ast
import subprocess
from pathlib import Path

import engine.memory
from engine.memory import catalog, footprint, hf_config, kv_pool, layers, specs, startup, units

ROOT = Path(__file__).resolve().parents[3]


def _names_imported_from_the_package() -> set[str]:
    files = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    used: set[str] = set()
    for line in files.splitlines():
        path = ROOT / line
        if path.is_file():
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.module == "engine.memory" and node.level == 0:
                    used |= {a.name for a in node.names}
    return used


def test_every_name_the_project_imports_from_engine_memory_is_public():
    submodules = {p.stem for p in Path(engine.memory.__file__).parent.glob("*.py")}
    used = _names_imported_from_the_package()
    assert used, "the scan found no `from engine.memory import ...` at all (the engine and its tests have some)"
    missing = sorted(used - submodules - set(engine.memory.__all__))
    assert not missing, f"imported from engine.memory but not in its __all__: {missing}"


def _defined_at_top_level(module) -> set[str]:
    """Names a module defines itself (functions, classes, assigned constants), not the ones it imports."""
    names: set[str] = set()
    for node in ast.parse(Path(module.__file__).read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def test_each_public_name_is_its_defining_modules_object():
    homes = {
        m: _defined_at_top_level(m) for m in (catalog, footprint, hf_config, kv_pool, layers, specs, startup, units)
    }
    for name in engine.memory.__all__:
        defined_in = [m for m, names in homes.items() if name in names]
        assert len(defined_in) == 1, f"{name}: defined in {[m.__name__ for m in defined_in]}"
        assert getattr(engine.memory, name) is getattr(defined_in[0], name), name
