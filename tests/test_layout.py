"""The layout rules of docs/ARCHITECTURE.md, checked on the source so a change that breaks one fails here.

Each rule is one small test: the engine's subsystem packages, the import direction of the layers, no private
names across modules, Streamlit only in the app layer, and no reference to a file outside the repository.
Files and functions are split where they hold two concepts, never to meet a line count, and `ruff format`
decides line breaks, so no rule here counts lines or files.
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ("engine", "kernels", "lessons", "ui", "pages", "progress")
# Which top-level packages each layer may import (imports only point down).
ALLOWED_IMPORTS = {
    "kernels": {"kernels"},
    "engine": {"engine", "kernels"},
    "lessons": {"lessons", "engine", "kernels"},
    "progress": {"progress"},
    "ui": {"ui", "lessons", "engine", "kernels", "progress"},
    "pages": {"ui", "lessons", "engine", "kernels", "progress"},
}
PROJECT_PACKAGES = set(LIBRARY) | {"bench", "tests", "scripts"}


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


def test_engine_subsystems_are_packages():
    for package in ("core", "model", "attention", "memory", "sim"):
        assert (ROOT / "engine" / package / "__init__.py").is_file(), f"engine/{package}/ is not a package"


def test_pages_folder_holds_only_pages():
    helpers = [p.name for p in (ROOT / "pages").glob("*.py") if p.name.startswith("_")]
    assert not helpers, f"page helpers belong in ui/, not pages/: {helpers}"


@pytest.mark.parametrize("layer", sorted(ALLOWED_IMPORTS))
def test_imports_point_down(layer):
    wrong = []
    for path in _modules(layer):
        for module, _ in _imports(ast.parse(path.read_text())):
            top = module.split(".")[0]
            if top in PROJECT_PACKAGES and top not in ALLOWED_IMPORTS[layer]:
                wrong.append(f"{_rel(path)} imports {module}")
    assert not wrong, f"{layer}/ may import only {sorted(ALLOWED_IMPORTS[layer])}: {wrong}"


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
