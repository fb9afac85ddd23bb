"""Many learners, one server: sessions never share engine state, progress or results.

Streamlit runs every browser session as a thread of one process, so anything stored at module level is
shared by the whole class. Two checks follow from that:
1. engine/, kernels/ and lessons/ keep no mutable state at module level (nothing a function writes
   with ``global``; module values are constants: immutable, or UPPER_CASE catalogs of immutable values).
2. Two AppTest sessions of the real app with different settings each see only their own allocator,
   progress and results.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import importlib
import inspect
import pkgutil
import re
import types
from collections.abc import Mapping, MutableMapping
from pathlib import Path

import pytest
import torch
from streamlit.testing.v1 import AppTest

from engine.model.loader import hf_state_dict
from tests.app.conftest import open_signin

ROOT = Path(__file__).resolve().parents[2]
APP = str(ROOT / "app.py")
PACKAGES = ("engine", "kernels", "lessons", "progress", "ui")
IMMUTABLE = (
    torch.dtype,
    torch.device,
    str,
    bytes,
    int,
    float,
    complex,
    bool,
    type(None),
    range,
    Path,
    re.Pattern,
    types.UnionType,
    enum.Enum,
)
# Module-level objects that describe things and are never written after import (reason per type).
DESCRIPTIONS = {
    "sqlalchemy.sql.schema.MetaData": "a table schema, built once at import",
    "sqlalchemy.sql.schema.Table": "a table schema, built once at import",
    "__future__._Feature": "from __future__ import annotations",
    "typing.TypeVar": "a type variable for annotations",
    "typing.ParamSpec": "a parameter-list variable for annotations",
    "ui.memo.Cache": "results shared by every learner (pure functions of their settings), read-only: ui.memo",
    "ui.memo._Registry": "the process's ui.memo caches by name: shared results, no learner's state",
    "logging.Logger": "the app's log (configured by the server, written with %-formatting), no learner's state",
    "prometheus_client.metrics.Counter": "the operator's process-wide counts (ui/metrics.py), no learner's state",
    "prometheus_client.metrics.Gauge": "the operator's process-wide gauges (ui/metrics.py), no learner's state",
    "prometheus_client.metrics.Histogram": "the operator's page-run times (ui/metrics.py), no learner's state",
}


def _modules() -> list[str]:
    names = []
    for pkg in PACKAGES:
        for info in pkgutil.walk_packages([str(ROOT / pkg)], prefix=f"{pkg}."):
            if not info.ispkg and info.name != "progress.migrations.env":  # Alembic's script: runs in its context only
                names.append(info.name)
    return names


def _is_frozen_value(value: object, depth: int = 0) -> bool:
    """True when value cannot be changed in place (recursing into tuples and constant containers)."""
    if depth > 6:
        return True
    if isinstance(value, IMMUTABLE) or callable(value):
        return True
    if isinstance(value, torch.Tensor):
        return False
    if isinstance(value, tuple | frozenset):
        return all(_is_frozen_value(v, depth + 1) for v in value)
    if isinstance(value, Mapping) and not isinstance(value, MutableMapping):  # read-only: a mappingproxy, a catalog
        return all(_is_frozen_value(v, depth + 1) for v in value.values())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        params = getattr(type(value), "__dataclass_params__", None)
        fields = (getattr(value, f.name) for f in dataclasses.fields(value))
        return bool(params and params.frozen) and all(_is_frozen_value(v, depth + 1) for v in fields)
    return False


def _constant_catalog(value: object, depth: int = 0) -> bool:
    """UPPER_CASE plain data (dicts, lists, tuples of immutable leaves): a read-only catalog by convention."""
    if depth > 8 or _is_frozen_value(value):
        return True
    if isinstance(value, dict):
        return all(_is_frozen_value(k) and _constant_catalog(v, depth + 1) for k, v in value.items())
    if isinstance(value, list | tuple | set | frozenset):
        return all(_constant_catalog(v, depth + 1) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        params = getattr(type(value), "__dataclass_params__", None)
        fields = (getattr(value, f.name) for f in dataclasses.fields(value))
        return bool(params and params.frozen) and all(_constant_catalog(v, depth + 1) for v in fields)
    return False


@pytest.mark.parametrize("name", _modules())
def test_module_has_no_mutable_state(name: str) -> None:
    source = (ROOT / (name.replace(".", "/") + ".py")).read_text()
    tree = ast.parse(source)
    globals_written = [n.names for n in ast.walk(tree) if isinstance(n, ast.Global)]
    assert not globals_written, f"{name} rebinds module state from functions: {globals_written}"
    # Only names the module itself binds at top level: the Triton interpreter injects its own helpers into a
    # kernel module's globals after a kernel has run, and those are not this project's state.
    own_names = {
        t.id
        for n in tree.body
        if isinstance(n, ast.Assign | ast.AnnAssign | ast.AugAssign)
        for t in ast.walk(n)
        if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)
    }

    mod = importlib.import_module(name)
    offenders = []
    for attr, value in vars(mod).items():
        if attr not in own_names or attr.startswith("__"):
            continue
        if inspect.ismodule(value) or inspect.isclass(value) or callable(value):
            continue
        type_name = f"{type(value).__module__}.{type(value).__qualname__}"
        if type_name in DESCRIPTIONS or _is_frozen_value(value):
            continue
        if attr.isupper() or attr.lstrip("_").isupper():
            if _constant_catalog(value):
                continue
        offenders.append(f"{attr}: {type_name}")
    assert not offenders, f"{name} holds mutable module-level state (per-learner state belongs in session): {offenders}"


def test_the_checker_catches_state() -> None:
    # The two predicates above must reject the kinds of state that leak between learners.
    @dataclasses.dataclass
    class Mutable:
        x: int = 0

    assert not _is_frozen_value([1, 2])
    assert not _is_frozen_value(torch.zeros(2))
    assert not _is_frozen_value(Mutable())
    assert not _constant_catalog({"a": Mutable()})
    assert not _constant_catalog({"a": torch.zeros(1)})
    assert _constant_catalog({"a": (1, "x"), "b": {"c": 2.0}})


# --- two live sessions of the real app ----------------------------------------------------------------


def _signin_script() -> None:
    """What app.py does around a page: sidebar sign-in, then a page that records progress."""
    import streamlit as st

    from ui.signin import persist, sidebar_signin

    progress = sidebar_signin()
    answer = st.text_input("answer", key="iso_answer")
    if answer:
        progress["quiz"]["iso.q"] = {"answer": answer, "correct": answer == "8"}
        persist(progress)


def _session(name: str | None, class_code: str, answer: str) -> AppTest:
    # AppTest re-runs only the page script of a file-based st.navigation app, so the sidebar is driven
    # through this stand-in for app.py (sidebar_signin + persist, exactly the calls app.py makes).
    at = AppTest.from_function(_signin_script, default_timeout=60).run()
    if name:
        open_signin(at)
        at.sidebar.text_input(key="progress_name").input(name)
        at.sidebar.text_input(key="progress_class").input(class_code)
        at.sidebar.text_input(key="progress_pass").input(f"{name}'s passphrase")  # the first sign-in sets it
        at.sidebar.button[0].click().run()
    at.text_input(key="iso_answer").input(answer).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    return at


def test_two_sessions_keep_their_own_progress(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("KVLAB_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("KVLAB_DATABASE_URL", raising=False)
    a = _session("Ana", "room-1", "8")
    b = _session("Ben", "room-1", "4")
    c = _session(None, "", "2")  # never signs in
    a.run()
    assert a.session_state["progress_learner"] == ("room-1", "Ana")
    assert b.session_state["progress_learner"] == ("room-1", "Ben")
    assert "progress_learner" not in c.session_state
    assert a.session_state["progress"]["quiz"]["iso.q"] == {"answer": "8", "correct": True}
    assert b.session_state["progress"]["quiz"]["iso.q"] == {"answer": "4", "correct": False}
    assert c.session_state["progress"]["quiz"]["iso.q"]["answer"] == "2"

    from progress.store import ProgressStore

    store = ProgressStore(f"sqlite:///{tmp_path / 'progress.sqlite3'}")
    saved = {r["learner"]: r["progress"]["quiz"]["iso.q"]["answer"] for r in store.class_records("room-1")}
    store.close()
    assert saved == {"Ana": "8", "Ben": "4"}  # the anonymous session stored nothing


def _metric(at: AppTest, label: str) -> str:
    return next(m.value for m in at.metric if m.label.startswith(label))


def test_two_sessions_keep_their_own_results() -> None:
    # Two learners on the GQA page at once, one at MQA (G=1) and one at MHA (G=32): re-running either
    # after the other moved must still show its own numbers (no shared page or engine state).
    a = AppTest.from_file("../../pages/2_gqa.py", default_timeout=120).run()
    b = AppTest.from_file("../../pages/2_gqa.py", default_timeout=120).run()
    a.select_slider(key="gqa_groups_llama-3-8b").set_value(1).run()
    b.select_slider(key="gqa_groups_llama-3-8b").set_value(32).run()
    a.run()
    assert not a.exception and not b.exception
    kv_a, kv_b = _metric(a, "KV per token"), _metric(b, "KV per token")
    assert kv_a == "16 KiB" and kv_b == "512 KiB", (kv_a, kv_b)  # 2 · 32 layers · G · 128 dims · 2 bytes
    assert a.session_state["progress"] is not b.session_state["progress"]


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory) -> Path:
    """A random two-layer Llama folder with its own tokenizer (no downloads, no demo weights needed)."""
    from tests.tiny_model import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("tiny-llama"), "blocks hold keys and values for every token. " * 8)


def _playground(folder: Path, block_size: int, num_blocks: int) -> AppTest:
    at = AppTest.from_file("../../pages/9_playground.py", default_timeout=180).run()
    at.radio(key="pg_source").set_value("folder").run()  # the path field is enabled once "folder" is picked
    at.text_input(key="pg_path").set_value(str(folder))
    at.select_slider(key="pg_block").set_value(block_size)
    at.slider(key="pg_blocks").set_value(num_blocks)
    at.slider(key="pg_max_tokens").set_value(4).run()
    return at


def test_two_sessions_keep_their_own_engine_and_allocator(tiny_folder, monkeypatch, playground_pool) -> None:
    pool = playground_pool()  # the server's one pool of playground engines: each session leases its own
    monkeypatch.setenv("KVLAB_MODEL_DIRS", str(tiny_folder.parent))  # the server allows the tiny model's folder
    # Two learners run the playground with different paged-KV settings, interleaved.
    a = _playground(tiny_folder, block_size=4, num_blocks=40)
    b = _playground(tiny_folder, block_size=16, num_blocks=10)
    a.button(key="pg_generate").click().run()
    b.button(key="pg_generate").click().run()
    a.run()
    for at in (a, b):
        assert not at.exception and not at.error, [e.value for e in at.error]
    llm_a, llm_b = (pool.engine(at.session_state["pg_ticket"]) for at in (a, b))
    assert llm_a is not llm_b
    assert llm_a.block_manager is not llm_b.block_manager and llm_a.kv_cache is not llm_b.kv_cache
    assert (llm_a.block_size, llm_b.block_size) == (4, 16)
    assert (a.session_state["pg_run"].block_size, b.session_state["pg_run"].block_size) == (4, 16)
    assert a.session_state["pg_run"] is not b.session_state["pg_run"]
    # The weights are the one shared read-only resource: same object, and generation did not change them.
    assert llm_a.model is llm_b.model
    from safetensors.torch import load_file

    saved = load_file(str(tiny_folder / "model.safetensors"))
    for name, param in hf_state_dict(llm_a.model).items():
        assert torch.equal(param.cpu(), saved[name].to(param.dtype)), f"shared weight {name} changed"
