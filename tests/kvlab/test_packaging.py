"""KV Lab as a package: pyproject lists every package and data file, the requirements files repeat its
dependencies exactly, the wheel built from the tracked files holds the app and its data with a `kvlab` command,
and that wheel, installed, answers `kvlab --version` and serves the course."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement

from bench.app_server import HOST, free_port

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SOURCE = ("kvlab", "ui", "lessons", "progress", "engine", "kernels")  # the importable packages the app ships


def _tracked(*patterns: str) -> list[Path]:
    """The repository's files a clean clone holds (tracked, or new and not ignored)."""
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", *patterns],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [ROOT / line for line in out.splitlines() if (ROOT / line).is_file()]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def _requirements(path: Path) -> set[str]:
    found = set()
    for line in path.read_text().splitlines():
        text = line.split(" #")[0].strip()
        if text and not text.startswith(("#", "-r")):
            found.add(str(Requirement(text)))
    return found


def test_the_version_is_pyprojects():
    import kvlab

    assert kvlab.__version__ == PYPROJECT["project"]["version"] == "0.2.0"


def test_every_package_is_listed_and_every_listed_one_exists():
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    on_disk = {
        ".".join(p.relative_to(ROOT).parent.parts)
        for p in _tracked("*__init__.py")
        if p.relative_to(ROOT).parts[0] in SOURCE
    }
    assert on_disk <= listed, f"add to [tool.setuptools] packages in pyproject.toml: {sorted(on_disk - listed)}"
    mapped = PYPROJECT["tool"]["setuptools"]["package-dir"]
    for name in listed:
        folder = ROOT / mapped.get(name, name.replace(".", "/"))
        assert folder.is_dir(), f"pyproject lists {name}, but {folder} does not exist"


def test_every_data_file_of_a_package_is_covered_by_package_data():
    data = PYPROJECT["tool"]["setuptools"]["package-data"]
    for package in ("lessons", "ui", "models"):
        files = [p for p in _tracked(f"{package}/*") if p.suffix not in (".py", ".pyc")]
        for path in files:
            rel = path.relative_to(ROOT / package).as_posix()
            if "/" in rel and (path.parent / "__init__.py").is_file():
                continue  # a subpackage's file: its own entry would list it
            assert any(Path(rel).match(g) for g in data.get(package, [])), f"{package}/{rel} is not package data"


def test_requirements_files_repeat_pyprojects_dependencies():
    project = PYPROJECT["project"]
    assert _requirements(ROOT / "requirements.txt") == {str(Requirement(r)) for r in project["dependencies"]}
    test_extra = {str(Requirement(r)) for r in project["optional-dependencies"]["test"]}
    assert _requirements(ROOT / "requirements-dev.txt") == test_extra
    assert "-r requirements.txt" in (ROOT / "requirements-dev.txt").read_text()


def test_the_licence_is_apache_2_everywhere():
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    assert "Apache License" in (ROOT / "LICENSE").read_text() and "Version 2.0" in (ROOT / "LICENSE").read_text()
    assert '"license": "Apache-2.0"' in (ROOT / "package.json").read_text()


def test_the_changelog_has_this_version():
    text = (ROOT / "CHANGELOG.md").read_text()
    assert re.search(rf"^## \[{re.escape(PYPROJECT['project']['version'])}\] - \d{{4}}-\d{{2}}-\d{{2}}$", text, re.M)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel built from the repository's tracked files only (what a clean clone holds), without deps."""
    src, out = tmp_path_factory.mktemp("clone"), tmp_path_factory.mktemp("dist")
    for path in _tracked():
        target = src / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w", out, src],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (found,) = out.glob("kvlab-*.whl")
    return found


@pytest.mark.slow
def test_the_wheel_holds_the_app_its_data_and_the_command(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {
        "app.py",
        "pages/0_welcome.py",
        "pages/9_playground.py",
        "pages/teacher.py",
        "kvlab/cli.py",
        "kvlab/settings.py",
        "kvlab/streamlit/config.toml",
        "ui/favicon.png",
        "ui/serve.py",
        "lessons/quizzes.json",
        "lessons/paged.md",
        "lessons/sections/kv_precision.md",
        "lessons/sim/traces.py",
        "engine/core/block_allocator.py",
        "kernels/ops.py",
        "progress/store.py",
        "progress/migrations/env.py",
        "progress/migrations/versions/0001_baseline.py",
        "models/demo/config.json",
        "models/demo/model.safetensors",
    }
    assert expected <= names, sorted(expected - names)
    assert not [n for n in names if n.startswith(("tests/", "bench/", "scripts/", "node_modules/"))]
    info = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    entry_points = zipfile.ZipFile(wheel).read(info).decode()
    assert re.search(r"^kvlab = kvlab\.cli:main$", entry_points, re.M)
    metadata = zipfile.ZipFile(wheel).read(info.replace("entry_points.txt", "METADATA")).decode()
    assert "License-Expression: Apache-2.0" in metadata and "Version: 0.2.0" in metadata
    assert "Requires-Dist: torch==2.13.0" in metadata


@pytest.mark.slow
def test_the_installed_command_says_its_version_in_a_fresh_venv(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True, timeout=120)
    python = venv / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q"]
    subprocess.run([*pip, str(wheel)], check=True, capture_output=True, timeout=300)
    done = subprocess.run([venv / "bin" / "kvlab", "--version"], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout.strip()) == (0, "kvlab 0.2.0")
    bad = subprocess.run(
        [venv / "bin" / "kvlab", "serve"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": os.environ["PATH"], "KVLAB_TEACHER_KEY_FILE": str(tmp_path / "missing")},
        cwd=tmp_path,
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.startswith("kvlab: KVLAB_TEACHER_KEY_FILE=") and "cannot be read" in bad.stderr


@pytest.mark.slow
def test_the_installed_app_serves_the_course_outside_the_checkout(wheel, tmp_path):
    """The wheel's files alone (installed into a folder, with this environment's dependencies) start a healthy
    server that runs a lesson: app.py, pages/, the lessons' prose and the Streamlit settings all travel."""
    from bench.app.client import StreamlitSession

    target, work = tmp_path / "site", tmp_path / "work"
    work.mkdir()
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target", target, wheel],
        check=True,
        capture_output=True,
        timeout=300,
    )
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KVLAB_", "PYTHONPATH", "TRITON_INTERPRET"))}
    env.update(PYTHONPATH=str(target), KVLAB_WARM="0", KVLAB_DATA_DIR=str(work / "data"))
    log = open(work / "server.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvlab", "serve", f"--server.port={port}", f"--server.address={HOST}"],
        cwd=work,  # no .streamlit/ here: the packaged settings must be applied
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        url = f"http://{HOST}:{port}"
        while not _healthy(url):  # bounded by the test's own end: a server that exits fails here
            assert proc.poll() is None, (work / "server.log").read_text()[-3000:]
            time.sleep(0.5)

        async def visit():
            async with StreamlitSession(url, timeout_s=120) as session:
                return await session.run("paged_attention")

        shown = asyncio.run(visit())
        assert not shown.errors and any("block" in t.lower() for t in shown.texts)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
    assert "Traceback" not in (work / "server.log").read_text()
