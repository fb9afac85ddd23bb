"""lessons.facts and lessons.vllm_source: the fact table's invariants, and the checker over small wheels built here.

No test downloads anything: each wheel is a zip written with zipfile in tmp_path, and `--version` runs a fake
pip (a Python script) that drops such a wheel where pip would.
"""

from __future__ import annotations

import json
import re
import sys
import zipfile
from pathlib import Path

import pytest

from engine.memory.catalog import GPUS
from engine.memory.startup import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_GPU_MEMORY_UTILIZATION,
    cudagraph_capture_sizes,
    default_max_num_batched_tokens,
    default_max_num_seqs,
)
from lessons import facts
from lessons.diagnosis import metrics
from lessons.facts import FACTS, HISTORY, Fact, HistoryFact
from lessons.vllm_source import SourceError, open_source

DOCS = Path(__file__).resolve().parents[2] / "docs"
CACHE_PY = "vllm/config/cache.py"
LOGGERS_PY = "vllm/v1/metrics/loggers.py"


def build_wheel(
    where: Path, files: dict[str, str], version: str = "0.34.0", name: str = "vllm", init: bool = True
) -> Path:
    """A wheel-shaped zip: vllm/__init__.py (unless init=False), a dist-info METADATA naming `name`, and `files`."""
    wheel = where / f"{name}-{version}-cp38-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        if init:
            archive.writestr("vllm/__init__.py", "")
        archive.writestr(
            f"{name}-{version}.dist-info/METADATA", f"Metadata-Version: 2.4\nName: {name}\nVersion: {version}\n"
        )
        for path, text in files.items():
            archive.writestr(path, text)
    return wheel


TINY = (
    Fact(key="util", claim="the default is 0.92", path=CACHE_PY, pattern=r"= 0\.92$", where="x.md"),
    Fact(
        key="gone", claim="old metric removed", path=LOGGERS_PY, pattern=r'name="vllm:old"', where="y.py", absent=True
    ),
)
TINY_FILES = {CACHE_PY: "    DEFAULT: float = 0.92\n", LOGGERS_PY: 'name="vllm:new"\n'}


@pytest.fixture
def tiny(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(facts, "FACTS", TINY)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = facts.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# --- reading vLLM's source ---


def test_a_wheel_is_read_as_a_zip_with_its_version(tmp_path: Path) -> None:
    source = open_source(build_wheel(tmp_path, TINY_FILES, version="0.33.0"))
    assert source.version == "0.33.0"
    assert source.read(CACHE_PY) == TINY_FILES[CACHE_PY]
    assert source.read("vllm/nowhere.py") is None


def test_an_unpacked_tree_is_read_with_the_version_from_its_version_file(tmp_path: Path) -> None:
    for path, text in {
        **TINY_FILES,
        "vllm/__init__.py": "",
        "vllm/_version.py": "__version__ = version = '0.34.0'\n",
    }.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    source = open_source(tmp_path)
    assert source.version == "0.34.0"
    assert source.read(LOGGERS_PY) == TINY_FILES[LOGGERS_PY]


def test_an_unpacked_tree_prefers_its_dist_info_and_refuses_another_package(tmp_path: Path) -> None:
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm/__init__.py").write_text("")
    meta = tmp_path / "vllm-0.33.0.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text("Name: vllm\nVersion: 0.33.0\n")
    assert open_source(tmp_path).version == "0.33.0"
    (meta / "METADATA").write_text("Name: torch\nVersion: 2.9.0\n")
    with pytest.raises(SourceError, match="torch"):
        open_source(tmp_path)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: d / "missing.whl", "does not exist"),
        (lambda d: (d / "notes.whl").write_text("not a zip") and d / "notes.whl", "not a zip"),
        (lambda d: build_wheel(d, {}, name="torch"), "not a vLLM wheel"),
        (lambda d: build_wheel(d, {}, init=False), "has no vllm/__init__.py"),
    ],
    ids=["missing", "not-a-zip", "other-package", "no-vllm-package"],
)
def test_a_bad_wheel_is_a_clear_message_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make, message: str
) -> None:
    path = make(tmp_path)
    code, out, err = run(capsys, "--wheel", str(path))
    assert code == 2
    assert message in err and str(path) in err
    assert out == "" and "Traceback" not in err


def test_a_source_folder_without_vllm_and_a_file_passed_as_source_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "--source", str(tmp_path))
    assert code == 2 and "not a vLLM source tree" in err
    wheel = build_wheel(tmp_path, TINY_FILES)
    code, _, err = run(capsys, "--source", str(wheel))
    assert code == 2 and "not a folder" in err


# --- checking facts ---


def test_every_fact_holds_and_exit_0(tmp_path: Path, capsys: pytest.CaptureFixture[str], tiny: None) -> None:
    code, out, _ = run(capsys, "--wheel", str(build_wheel(tmp_path, TINY_FILES)))
    assert out.splitlines() == [
        f"PASS util  the default is 0.92  ({CACHE_PY})",
        f"PASS gone  old metric removed  ({LOGGERS_PY})",
        "2 of 2 facts hold at vLLM 0.34.0",
    ]
    assert code == 0


def test_a_changed_value_fails_with_why_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tiny: None
) -> None:
    files = {**TINY_FILES, CACHE_PY: "    DEFAULT: float = 0.9\n"}
    code, out, _ = run(capsys, "--wheel", str(build_wheel(tmp_path, files, version="0.35.0")))
    lines = out.splitlines()
    assert lines[0] == f"FAIL util  the default is 0.92  ({CACHE_PY}): pattern not found"
    assert lines[1].startswith("PASS gone")
    assert lines[-1] == "1 of 2 facts hold at vLLM 0.35.0"
    assert code == 1


def test_a_missing_file_fails_the_fact_that_reads_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tiny: None
) -> None:
    code, out, _ = run(capsys, "--wheel", str(build_wheel(tmp_path, {LOGGERS_PY: TINY_FILES[LOGGERS_PY]})))
    assert f"FAIL util  the default is 0.92  ({CACHE_PY}): file missing: {CACHE_PY}" in out.splitlines()
    assert code == 1


def test_an_absent_fact_fails_when_its_pattern_is_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tiny: None
) -> None:
    files = {**TINY_FILES, LOGGERS_PY: 'name="vllm:new"\nname="vllm:old"\n'}
    code, out, _ = run(capsys, "--wheel", str(build_wheel(tmp_path, files)))
    assert (
        out.splitlines()[1]
        == f"FAIL gone  old metric removed  ({LOGGERS_PY}): pattern found, but the fact says it is gone"
    )
    assert code == 1


def test_an_absent_fact_whose_file_is_missing_fails() -> None:
    # a file that is gone cannot show that the pattern is gone from it: the path is wrong, so the fact fails
    source = facts.VllmSource("built", "0.34.0", {})
    assert not facts.check(TINY[1], source).holds


def test_json_output(tmp_path: Path, capsys: pytest.CaptureFixture[str], tiny: None) -> None:
    files = {**TINY_FILES, CACHE_PY: "nothing\n"}
    code, out, _ = run(capsys, "--json", "--wheel", str(build_wheel(tmp_path, files)))
    report = json.loads(out)
    assert code == 1
    assert (report["version"], report["held"], report["total"]) == ("0.34.0", 1, 2)
    assert [(f["key"], f["holds"], f["why"]) for f in report["facts"]] == [
        ("util", False, "pattern not found"),
        ("gone", True, ""),
    ]
    assert report["facts"][1]["absent"] is True and report["facts"][0]["where"] == "x.md"


def test_patterns_spanning_lines_need_their_own_dotall_flag(tmp_path: Path) -> None:
    source = open_source(build_wheel(tmp_path, {CACHE_PY: "a = 1\nb = 2\n"}))
    assert not facts.check(Fact("k", "c", CACHE_PY, r"a = 1.b = 2", "w"), source).holds
    assert facts.check(Fact("k", "c", CACHE_PY, r"(?s)a = 1.b = 2", "w"), source).holds
    assert facts.check(Fact("k", "c", CACHE_PY, r"^b = 2$", "w"), source).holds  # MULTILINE: ^ and $ per line


# --- --version through a fake pip ---


def fake_pip(tmp_path: Path, wheel: Path | None, exit_code: int = 0) -> tuple[str, ...]:
    """A pip stand-in: records its arguments, copies `wheel` into the -d folder, exits with `exit_code`."""
    script = tmp_path / "fake_pip.py"
    script.write_text(
        "import shutil, sys, pathlib\n"
        f"pathlib.Path({str(tmp_path / 'pip-args.txt')!r}).write_text(' '.join(sys.argv[1:]))\n"
        f"wheel = {str(wheel) if wheel else ''!r}\n"
        "if wheel:\n"
        "    shutil.copy(wheel, sys.argv[sys.argv.index('-d') + 1])\n"
        f"if {exit_code}:\n"
        "    print('ERROR: No matching distribution found for vllm==9.9.9', file=sys.stderr)\n"
        f"sys.exit({exit_code})\n"
    )
    return (sys.executable, str(script))


def test_version_fetches_the_wheel_with_pip_and_checks_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tiny: None
) -> None:
    built = tmp_path / "built"
    built.mkdir()
    monkeypatch.setattr(facts, "PIP_COMMAND", fake_pip(tmp_path, build_wheel(built, TINY_FILES, version="0.33.0")))
    code, out, _ = run(capsys, "--version", "0.33.0")
    assert code == 0 and out.splitlines()[-1] == "2 of 2 facts hold at vLLM 0.33.0"
    args = (tmp_path / "pip-args.txt").read_text().split()
    assert args[:4] == ["download", "--no-deps", "--only-binary=:all:", "vllm==0.33.0"]
    assert args[4] == "-d" and len(args) == 6  # no install, one target folder


def test_a_pip_failure_is_a_clear_message_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(facts, "PIP_COMMAND", fake_pip(tmp_path, None, exit_code=1))
    code, out, err = run(capsys, "--version", "9.9.9")
    assert code == 2 and out == ""
    assert "pip could not fetch vllm==9.9.9 (exit 1): ERROR: No matching distribution" in err
    assert "--wheel PATH" in err and "Traceback" not in err


def test_pip_that_cannot_run_or_leaves_no_wheel_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(facts, "PIP_COMMAND", (str(tmp_path / "no-such-pip"),))
    code, _, err = run(capsys, "--version", "0.34.0")
    assert code == 2 and "could not run pip" in err
    monkeypatch.setattr(facts, "PIP_COMMAND", fake_pip(tmp_path, None))
    code, _, err = run(capsys, "--version", "0.34.0")
    assert code == 2 and "left no vllm-*.whl" in err
    code, _, err = run(capsys, "--version", "0.34.0; rm -rf x")
    assert code == 2 and "is not a vLLM version" in err


# --- history facts ---


HIST = (
    HistoryFact(Fact("util_092", "became 0.92 in v0.20.0", CACHE_PY, r"default=0\.92,", "z.py"), "0.20.0", "0.19.1"),
)


@pytest.mark.parametrize(
    ("version", "text", "code", "verdict"),
    [
        ("0.20.0", "Field(default=0.92, gt=0)", 0, "PASS"),
        ("0.20.0", "Field(default=0.9, gt=0)", 1, "FAIL"),
        ("0.19.1", "Field(default=0.9, gt=0)", 0, "PASS"),
        ("0.19.1", "Field(default=0.92, gt=0)", 1, "FAIL"),
    ],
)
def test_a_history_fact_holds_at_its_release_and_not_before(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, version, text, code, verdict
) -> None:
    monkeypatch.setattr(facts, "HISTORY", HIST)
    result = run(capsys, "--history", "--wheel", str(build_wheel(tmp_path, {CACHE_PY: text}, version=version)))
    assert result[0] == code
    assert result[1].splitlines()[0].startswith(f"{verdict} util_092")


def test_history_at_an_unrelated_release_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(facts, "HISTORY", HIST)
    code, _, err = run(capsys, "--history", "--wheel", str(build_wheel(tmp_path, TINY_FILES, version="0.34.0")))
    assert code == 2 and "no history fact concerns vLLM 0.34.0" in err and "0.19.1" in err


# --- the table itself ---


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def test_the_table_invariants() -> None:
    keys = [f.key for f in FACTS] + [h.fact.key for h in HISTORY]
    assert len(FACTS) >= 30
    assert len(keys) == len(set(keys)), "fact keys must be unique"
    for fact in [*FACTS, *(h.fact for h in HISTORY)]:
        assert re.fullmatch(r"[a-z][a-z0-9_]*", fact.key), fact.key
        assert fact.path.startswith("vllm/") and fact.path.endswith(".py"), fact.key
        re.compile(fact.pattern)
        assert fact.claim.strip() and fact.where.strip(), fact.key
    for item in HISTORY:
        assert _release(item.before) < _release(item.since), item.fact.key


def _fact(key: str) -> Fact:
    return {f.key: f for f in [*FACTS, *(h.fact for h in HISTORY)]}[key]


# Facts whose pattern is built from a course constant: the constant's value, the text vLLM would have with it, and
# the same text with another value (which must not match: the pattern checks the value, not just the shape).
_LARGE, _HUGE, _SMALL = GPUS["h100-sxm"], GPUS["b200"], GPUS["l4"]
CONSTANT_BUILT = {
    "gpu_memory_utilization_default": (
        DEFAULT_GPU_MEMORY_UTILIZATION,
        "    DEFAULT_GPU_MEMORY_UTILIZATION: ClassVar[float] = {}\n",
    ),
    "block_size_default": (DEFAULT_BLOCK_SIZE, "    DEFAULT_BLOCK_SIZE: ClassVar[int] = {}\n"),
    "cudagraph_capture_max": (
        cudagraph_capture_sizes(1024, 16384)[-1],
        "        default_max_graph_size = 1024 if is_data_center_blackwell else {}\n",
    ),
    "metric_running": (metrics.RUNNING, 'name="{}",'),
    "metric_waiting": (metrics.WAITING, 'name="{}",'),
    "metric_kv_cache_usage": (metrics.KV_NEW, 'name="{}",'),
    "metric_cache_config_info": (metrics.CACHE_CONFIG, 'name = "{}"'),
}


@pytest.mark.parametrize("key", sorted(CONSTANT_BUILT))
def test_a_constant_built_pattern_checks_the_constants_value(key: str) -> None:
    value, template = CONSTANT_BUILT[key]
    fact = _fact(key)
    assert re.escape(str(value)) in fact.pattern
    assert re.search(fact.pattern, template.format(value), re.MULTILINE)
    other = value + 1 if isinstance(value, int) else value + 0.01 if isinstance(value, float) else value + "_x"
    assert not re.search(fact.pattern, template.format(other), re.MULTILINE)


def test_the_batch_default_facts_carry_the_courses_numbers_for_each_gpu_tier() -> None:
    for key, gpu in (
        ("batch_defaults_large_gpu", _LARGE),
        ("batch_defaults_huge_gpu", _HUGE),
        ("batch_defaults_small_gpu", _SMALL),
    ):
        fact = _fact(key)
        numbers = [int(n) for n in re.findall(r"OPENAI_API_SERVER: (\d+),", fact.pattern)]
        assert numbers == [default_max_num_batched_tokens(gpu), default_max_num_seqs(gpu)], key
        assert f"{default_max_num_batched_tokens(gpu)}" in fact.claim, key


def test_removed_metrics_are_absent_facts_and_the_preemption_counter_drops_total() -> None:
    assert (
        _fact("metric_gpu_cache_usage_removed").absent
        and metrics.KV_OLD in _fact("metric_gpu_cache_usage_removed").pattern
    )
    assert _fact("metric_swapped_removed").absent and metrics.SWAPPED in _fact("metric_swapped_removed").pattern
    # Prometheus adds _total to a counter's name: vLLM registers vllm:num_preemptions, scraped as ..._total
    assert 'name="vllm:num_preemptions"' in _fact("metric_preemptions").pattern
    assert not any(f.absent for f in FACTS if f.key.startswith("metric_") and not f.key.endswith("_removed"))


# --- the saved runs in docs/ ---


def _saved(version: str) -> list[str]:
    return (DOCS / f"vllm-facts-{version}.txt").read_text(encoding="utf-8").splitlines()


@pytest.mark.parametrize("version", [facts.STATED_RELEASE, "0.33.0"])
def test_the_saved_runs_cover_every_fact(version: str) -> None:
    lines = _saved(version)
    verdicts = {m.group(2): m.group(1) for m in (re.match(r"(PASS|FAIL) (\S+)  ", line) for line in lines[:-1]) if m}
    assert list(verdicts) == [f.key for f in FACTS], "re-run the checker and save its output (docs/VLLM_FACTS.md)"
    held = list(verdicts.values()).count("PASS")
    assert lines[-1] == f"{held} of {len(FACTS)} facts hold at vLLM {version}"


def test_the_saved_run_at_the_stated_release_shows_every_fact_pass() -> None:
    lines = _saved(facts.STATED_RELEASE)
    failing = [line for line in lines[:-1] if not line.startswith("PASS ")]
    assert failing == [], "the course disagrees with the vLLM release it states"
    assert lines[-1] == f"{len(FACTS)} of {len(FACTS)} facts hold at vLLM {facts.STATED_RELEASE}"


def test_every_vllm_file_the_course_cites_has_a_fact() -> None:
    # A page that cites a file of vLLM's source states something about it: that claim belongs in the table.
    root = Path(__file__).resolve().parents[2]
    own = {root / "lessons" / "facts.py", root / "lessons" / "vllm_source.py"}
    checked = {f.path for f in FACTS} | {h.fact.path for h in HISTORY}
    missing = {}
    for folder in ("lessons", "engine", "pages", "ui"):
        for path in (root / folder).rglob("*"):
            if path.suffix in (".py", ".md", ".json") and path not in own:
                for cited in set(re.findall(r"\bvllm/[\w/]+\.py\b", path.read_text(encoding="utf-8"))) - checked:
                    missing.setdefault(cited, []).append(str(path.relative_to(root)))
    assert not missing, f"add a fact to lessons/facts.py for each claim these files make: {missing}"
