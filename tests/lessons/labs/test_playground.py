"""lessons/labs/playground.py: prompt and folder validation, runs on shared weights, step traces as rows."""

import gc
import itertools
import os
import re
import shutil
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.llm import LLM
from engine.model.llama import CausalLM
from engine.sampling_params import SamplingParams
from lessons.labs import playground as lab
from lessons.labs.pool import BlockState
from tests import tiny_model

TEXT = "def add(a, b):\n    return a + b\nclass Stack:\n    def push(self, x):\n        self.items.append(x)\n" * 4


def make_tiny_model(folder: Path) -> Path:
    """A random tiny Llama folder (hidden 32, 2 layers, GQA 4/2) with a byte-BPE tokenizer, in the HF layout."""
    return tiny_model.make_tiny_model(folder, TEXT)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return str(make_tiny_model(tmp_path_factory.mktemp("tiny")))


@pytest.mark.parametrize(
    ("text", "match"),
    [("", "no prompts"), ("  \n\n ", "no prompts"), ("a\n" * 9, "9 prompts"), ("x" * 401, "401 characters")],
)
def test_bad_prompts_raise_with_guidance(text, match):
    with pytest.raises(ValueError, match=match):
        lab.parse_prompts(text)


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.text(st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")), min_size=1, max_size=40)
        .map(str.strip)
        .filter(bool),
        min_size=1,
        max_size=lab.MAX_PROMPTS,
    )
)
def test_parse_prompts_round_trips_lines(prompts):
    assert lab.parse_prompts("\n".join(prompts) + "\n\n") == prompts


def policy_for(*roots: Path, max_bytes: int = lab.DEFAULT_MAX_MODEL_BYTES) -> lab.ModelPolicy:
    """A policy allowing `roots`, named 'models/' (the first) and 'more-N/' as an operator would write them."""
    labels = tuple("models/" if i == 0 else f"more-{i}/" for i in range(len(roots)))
    return lab.ModelPolicy(tuple(r.resolve() for r in roots), labels, max_bytes)


@pytest.fixture
def server(tmp_path, tiny):
    """A server's disk: an allowed root holding a model, odd files and links out, and things outside it."""
    root = tmp_path / "models"
    root.mkdir()
    shutil.copytree(tiny, root / "tiny")
    shutil.copytree(tiny, tmp_path / "outside")  # a real model folder outside the root
    shutil.copytree(tiny, tmp_path / "models-evil")  # shares the root's name as a string prefix
    (root / "nocfg").mkdir()
    (root / "noweights").mkdir()
    (root / "noweights" / "config.json").write_text("{}")
    (root / "noweights" / "pytorch_model.bin").write_text("")
    (root / "afile").write_text("x")
    os.mkfifo(root / "fifo")
    (root / "link-out").symlink_to(tmp_path / "outside")
    (root / "link-missing").symlink_to(tmp_path / "nowhere")
    (root / "link-in").symlink_to(root / "tiny")  # a link that stays inside is fine
    (root / "loop").symlink_to(root / "loop")
    return root, policy_for(root)


def test_policy_from_the_environment(tmp_path):
    unset = lab.model_policy({})
    assert unset.roots == ((lab.PROJECT_DIR / "models").resolve(),) and unset.labels == ("models/",)
    assert unset.max_bytes == lab.DEFAULT_MAX_MODEL_BYTES == 2 * 2**30 and unset.folders_allowed
    assert unset.sources == ("demo", "folder") and unset.limit_text == "2.00 GiB"
    for off in ("", "  ", os.pathsep):
        assert not lab.model_policy({lab.MODEL_DIRS_ENV: off}).folders_allowed
        assert lab.model_policy({lab.MODEL_DIRS_ENV: off}).sources == ("demo",)
    assert lab.FOLDERS_DISABLED_NOTICE == "T" + lab.FOLDERS_DISABLED[1:] + "."
    (tmp_path / "a").mkdir()
    (tmp_path / "b").symlink_to(tmp_path / "a")
    env = {lab.MODEL_DIRS_ENV: os.pathsep.join([str(tmp_path / "a"), "", str(tmp_path / "b"), "models"])}
    two = lab.model_policy(env | {lab.MAX_BYTES_ENV: " 1000 "})
    assert two.roots == ((tmp_path / "a").resolve(), (lab.PROJECT_DIR / "models").resolve())  # b is a, once
    assert two.labels == (str(tmp_path / "a"), "models") and two.max_bytes == 1000
    for bad in ("lots", "0", "-5", "1.5", "1_000", "１０００", "+5"):
        with pytest.raises(ValueError, match=re.escape(f"KVLAB_MAX_MODEL_BYTES='{bad}' must be a whole number")):
            lab.model_policy({lab.MAX_BYTES_ENV: bad})


def test_resolve_model_inside_the_roots(server, tiny):
    root, policy = server
    real = str((root / "tiny").resolve())
    assert lab.resolve_model("folder", f"  {root / 'tiny'} ", policy) == real
    assert lab.resolve_model("folder", "tiny", policy) == real  # relative: under the first root
    assert lab.resolve_model("folder", str(root / "link-in"), policy) == real  # one cache entry per folder
    assert lab.resolve_model("folder", str(root / "nocfg" / ".." / "tiny"), policy) == real
    with pytest.raises(ValueError, match="empty; type the path of a model folder under models/"):
        lab.resolve_model("folder", "   ", policy)
    with pytest.raises(ValueError, match="^models/nocfg has no config.json"):
        lab.resolve_model("folder", "nocfg", policy)
    with pytest.raises(ValueError, match="^models/noweights has no \\*.safetensors"):
        lab.resolve_model("folder", str(root / "noweights"), policy)
    with pytest.raises(ValueError, match="unknown model source"):
        lab.resolve_model("hub", "meta-llama/x", policy)
    with pytest.raises(ValueError, match="does not allow model folders.*KVLAB_MODEL_DIRS"):
        lab.resolve_model("folder", str(root / "tiny"), lab.model_policy({lab.MODEL_DIRS_ENV: ""}))
    with pytest.raises(ValueError, match="No model folder the server allows"):  # the default: models/ only
        lab.resolve_model("folder", tiny)
    demo_ready = any(lab.DEMO_DIR.glob("*.safetensors"))
    if demo_ready:
        assert lab.resolve_model("demo", "", lab.model_policy({lab.MODEL_DIRS_ENV: ""})) == "demo"
    else:
        with pytest.raises(ValueError, match="demo model's weights are not installed"):
            lab.resolve_model("demo")


HOSTILE = [
    "/root",
    "/etc",
    "/etc/passwd",
    "/nonexistent",
    "/proc/self",
    "/proc/self/root",
    "/dev/null",
    "/",
    "..",
    "../outside",
    "../models-evil",
    "tiny/../../outside",
    "link-out",
    "link-missing",
    "afile",
    "fifo",
    "missing",
    "loop",
    "nocfg/missing",
    "tiny/config.json",
    "a\x00b",
    "/etc/\x00",
]


def test_every_path_outside_or_not_there_gets_one_answer(server, tmp_path):
    root, policy = server
    absolute = [str(tmp_path / p) for p in ("outside", "models-evil", "nowhere", "models-evil/config.json")]
    absolute += [str(root / p) for p in ("link-out", "link-missing", "fifo", "afile", "loop", "..")]
    absolute += [f"{root}/../outside", f"{root}-evil", f"{root}/tiny/../../outside"]
    answers = {}
    for typed in HOSTILE + absolute:
        with pytest.raises(ValueError) as info:
            lab.resolve_model("folder", typed, policy)
        answers[typed] = str(info.value)
    assert set(answers.values()) == {policy.refusal()}, answers
    assert "models/" in policy.refusal() and str(tmp_path) not in policy.refusal()
    for typed in ("~root", "~", "~/models", "~nosuchuser123/x"):  # never expanded: no home directory lookups
        with pytest.raises(ValueError, match="^a path starting with ~ is not accepted here") as info:
            lab.resolve_model("folder", typed, policy)
        assert "root" not in str(info.value).replace("~", "")


def test_the_loader_refuses_what_resolve_model_would(server, tmp_path):
    root, policy = server
    for path in (tmp_path / "outside", root / "link-out", tmp_path / "models-evil", root / "afile"):
        with pytest.raises(ValueError, match="^that model folder is not a readable file or folder inside"):
            lab.load(str(path), "cpu", policy)
    net, _, tok = lab.load(lab.resolve_model("folder", "link-in", policy), "cpu", policy)
    assert tok is not None and net.config.vocab_size == tok.vocab_size


def test_size_limit_names_the_size_and_the_limit(server):
    root, _ = server
    disk = (root / "tiny" / "model.safetensors").stat().st_size
    model = lab.resolve_model("folder", "tiny", policy_for(root))
    expected = (
        r"too large.*weights on disk take .* KiB, more than its limit of 1,000 bytes \(KVLAB_MAX_MODEL_BYTES=1000\)"
    )
    with pytest.raises(ValueError, match=expected):
        lab.load(model, "cpu", policy_for(root, max_bytes=1000))
    assert lab.load(model, "cpu", policy_for(root, max_bytes=disk))[0] is not None


def causal_lms() -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if type(o) is CausalLM)


def test_corrupt_weights_are_a_value_error_that_frees_the_model(tmp_path, tiny):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text((Path(tiny) / "config.json").read_text())
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    policy = policy_for(tmp_path)
    before = causal_lms()
    with pytest.raises(ValueError, match="could not load") as info:
        lab.load(lab.resolve_model("folder", str(broken), policy), "cpu", policy)
    assert info.value.__cause__ is None and info.value.__context__ is None  # no traceback keeps the model
    assert causal_lms() == before


def test_engine_settings_pool_holds_blocks_times_block_size():
    assert lab.EngineSettings(block_size=16, num_blocks=12).pool_tokens == 192
    assert lab.EngineSettings().pool_tokens == 8 * 12  # the page's defaults
    assert lab.EngineSettings(block_size=1, num_blocks=1).pool_tokens == 1


def test_sampling_params_limits():
    assert lab.sampling_params(4, 0.0, 1.0, 0, 3) == SamplingParams(max_tokens=4, temperature=0.0, seed=3)
    with pytest.raises(ValueError, match="max tokens 65"):
        lab.sampling_params(65, 0.0, 1.0, 0, None)
    with pytest.raises(ValueError, match="top_p"):
        lab.sampling_params(4, 0.0, 0.0, 0, None)


def test_small_pool_run_matches_solo_runs_and_rows_add_up(tiny):
    loaded = lab.load(tiny, "cpu", policy_for(Path(tiny).parent))
    llm = lab.new_engine(loaded, tiny, lab.EngineSettings(block_size=4, num_blocks=9))
    assert llm.model is loaded[0]  # weights shared, not reloaded
    prompts = ["def add(a, b):", "class Stack:", "self.items", "return a + b"]
    params = SamplingParams(max_tokens=10, temperature=0.0, ignore_eos=True)
    lines: list[str] = []
    run = lab.generate(llm, prompts, params, on_progress=lines.append)
    assert len(lines) == len(run.traces) and f"{run.generated_tokens} tokens" in lines[-1]
    assert run.num_preemptions > 0 and run.peak_kv_usage == 1.0  # 36 slots for 4 growing requests
    solo = LLM(tiny, block_size=16, num_gpu_blocks=64, device="cpu")  # independent engine, roomy pool
    for p, out in zip(prompts, run.outputs, strict=True):
        assert out.token_ids == solo.generate([p], params)[0].token_ids  # paging + preemption change nothing
    rows = lab.step_rows(run)
    assert len(rows) == len(run.traces) and rows[0]["step"] == 1
    assert sum(sum(1 for r in t.scheduled if r.sampled_token is not None) for t in run.traces) == run.generated_tokens
    assert rows[-1]["running"] == 0 and rows[-1]["KV blocks used"] == 0
    assert all(0 <= r["KV blocks used"] <= 9 for r in rows)
    assert {r["request"] for r in lab.output_rows(run)} == {"r0", "r1", "r2", "r3"}
    steps, series = lab.timeline(run)
    assert steps == list(range(1, len(run.traces) + 1)) and list(series) == ["running", "waiting", "KV blocks used"]
    for i, t in enumerate(run.traces):  # read off the traces themselves
        assert series["running"][i] == len(t.running) and series["waiting"][i] == len(t.waiting)
        assert series["KV blocks used"][i] == t.num_blocks - t.num_free_blocks
    assert [r["step"] for r in rows] == steps  # the chart and its table say the same numbers
    assert all(series[name] == [r[name] for r in rows] for name in lab.TIMELINE)
    assert run.generated_tokens == 40 and run.tokens_per_s > 0
    for i, t in enumerate(run.traces):
        view = lab.step_view(run, i)
        assert sum(len(tbl) for tbl in view.tables.values()) <= t.num_blocks - t.num_free_blocks
        for name, table in view.tables.items():
            assert len(view.fills[name]) == len(table) and all(1 <= f <= 4 for f in view.fills[name])
        assert view.table_rows() == [{"request": n, "block table": str(tbl)} for n, tbl in view.tables.items()]
        assert [b.block_id for b in view.blocks] == [b.block_id for b in t.blocks]  # the whole pool, in id order
        for drawn, info in zip(view.blocks, t.blocks, strict=True):
            assert (drawn.ref_count, drawn.filled) == (info.ref_count, info.num_filled)
            assert set(drawn.owners) <= set(view.tables) | {f"r{i}" for i in range(4)}
            assert drawn.state is (BlockState.SHARED if info.ref_count > 1 else BlockState(info.state))
        assert view.block_rows() == [b.row() for b in view.blocks]
        assert f"{t.num_blocks - t.num_free_blocks} of 9 blocks" in view.story
    assert any("Preempted" in lab.step_view(run, i).story for i in range(len(run.traces)))
    with pytest.raises(ValueError, match="does not exist"):
        lab.step_view(run, len(run.traces))
    with pytest.raises(ValueError, match="num blocks 0"):
        lab.new_engine(loaded, tiny, lab.EngineSettings(num_blocks=0))


class Interrupted(BaseException):
    """Like Streamlit's RerunException: a BaseException raised inside the page's progress callback."""


def interrupt_at(step: int, exc: BaseException) -> Callable[[str], None]:
    calls = itertools.count(1)

    def callback(_line: str) -> None:
        if next(calls) == step:
            raise exc

    return callback


@pytest.mark.parametrize(
    ("step", "exc"),
    [(1, Interrupted()), (5, Interrupted()), (3, RuntimeError("callback broke")), (1, KeyboardInterrupt())],
)
@pytest.mark.parametrize("prefix", [False, True])
def test_an_interrupted_run_leaves_nothing_behind(tiny, step, exc, prefix):
    loaded = lab.load(tiny, "cpu", policy_for(Path(tiny).parent))
    settings = lab.EngineSettings(block_size=4, num_blocks=9, enable_prefix_caching=prefix)
    llm = lab.new_engine(loaded, tiny, settings)
    prompts = ["def add(a, b):", "class Stack:", "self.items", "return a + b"]
    params = SamplingParams(max_tokens=10, temperature=0.0, ignore_eos=True)
    with pytest.raises(type(exc)):
        lab.generate(llm, prompts, params, on_progress=interrupt_at(step, exc))  # Generate pressed again
    assert lab.pending_requests(llm) == [] and not llm.has_unfinished_requests()
    assert llm.block_manager.num_free_blocks == llm.num_gpu_blocks  # every block back in the pool
    again = lab.generate(llm, prompts[:3], params)  # the next click, same engine
    fresh = lab.generate(lab.new_engine(loaded, tiny, settings), prompts[:3], params)
    assert [o.token_ids for o in again.outputs] == [o.token_ids for o in fresh.outputs]
    assert [o.prompt for o in again.outputs] == prompts[:3]  # exactly the prompts it was given
    ids = {o.request_id for o in again.outputs}
    for t in again.traces:  # no phantom request from the interrupted run in any step
        assert set(t.waiting) | set(t.running) | set(t.admitted) <= ids and len(t.waiting) <= 3
    assert {r["request"] for r in lab.output_rows(again)} == {"r0", "r1", "r2"}
    assert all(set(r["joined"].split()) <= {"r0", "r1", "r2", "—"} for r in lab.step_rows(again))
    assert again.traces[-1].num_free_blocks == llm.num_gpu_blocks and lab.pending_requests(llm) == []
    with pytest.raises(ValueError):  # a bad prompt queues nothing either
        lab.generate(llm, ["ok", 7], params)  # type: ignore[list-item]
    assert lab.pending_requests(llm) == []


def test_leftovers_from_an_older_interrupted_run_are_cleared(tiny):
    loaded = lab.load(tiny, "cpu", policy_for(Path(tiny).parent))
    llm = lab.new_engine(loaded, tiny, lab.EngineSettings(block_size=4, num_blocks=9))
    params = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)
    stale = [llm.add_request("class Stack:", params), llm.add_request("self.items", params)]
    llm.step()  # a run stopped without cleaning up (an older build, a killed thread)
    run = lab.generate(llm, ["def add(a, b):"], params)
    assert [o.prompt for o in run.outputs] == ["def add(a, b):"]
    assert all(set(t.running) | set(t.waiting) <= {run.outputs[0].request_id} for t in run.traces)
    for request_id in stale:
        with pytest.raises(ValueError, match="unknown request id"):
            llm.get_output(request_id)  # forgotten, not only unscheduled


def test_a_prompt_longer_than_the_pool_is_named_in_the_page_words(tiny):
    loaded = lab.load(tiny, "cpu", policy_for(Path(tiny).parent))
    llm = lab.new_engine(loaded, tiny, lab.EngineSettings(block_size=1, num_blocks=4))
    prompts = ["a", "blocks hold keys and values for every token"]
    with pytest.raises(
        ValueError, match=r"prompt 2 has \d+ tokens but the engine accepts at most 4: the KV pool holds 4 "
    ):
        lab.generate(llm, prompts, lab.sampling_params(2, 0.0, 1.0, 0, 0))
    assert not llm.has_unfinished_requests() and llm.block_manager.num_free_blocks == 4


def test_a_run_reports_its_own_prefix_cache_hits_in_tokens(tiny):
    loaded = lab.load(tiny, "cpu", policy_for(Path(tiny).parent))
    llm = lab.new_engine(loaded, tiny, lab.EngineSettings(block_size=4, num_blocks=64, enable_prefix_caching=True))
    params = SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True)
    first = lab.generate(llm, ["def add(a, b): return a + b"], params)
    assert first.prefix_cache_hits == 0 and first.prefix_cache_queries == len(first.outputs[0].prompt_token_ids)
    again = lab.generate(llm, ["def add(a, b): return a + b"], params)  # the same engine: its blocks are cached
    n = len(again.outputs[0].prompt_token_ids)
    # only full blocks hit, and never the block holding the last prompt token (it must be computed)
    assert again.prefix_cache_queries == n and again.prefix_cache_hits == again.outputs[0].num_cached_tokens
    assert 0 < again.prefix_cache_hits <= 4 * ((n - 1) // 4)
    assert again.prefix_cache_hit_rate == again.prefix_cache_hits / n
    off = lab.new_engine(loaded, tiny, lab.EngineSettings(block_size=4, num_blocks=64))
    assert lab.generate(off, ["def add(a, b): return a + b"], params).prefix_cache_queries == 0  # caching off


# --- The server's engine pool: bounded KV memory, engines freed when a session ends or idles -------------


class Clock:
    """A hand-moved clock for the pool's idle times."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def fake_engine() -> object:
    return type("FakeLLM", (), {})()


def pool_of(budget: int, **kw) -> lab.EnginePool:
    return lab.EnginePool(budget, wait_s=kw.pop("wait_s", 0.0), **kw)


def use(pool: lab.EnginePool, ticket: lab.PoolTicket, key: object, nbytes: int, build=fake_engine) -> object:
    with pool.lease(ticket, key, nbytes, build) as llm:
        return llm


@pytest.mark.parametrize(("block_size", "num_blocks"), [(1, 1), (4, 9), (16, 256), (256, 3)])
def test_kv_pool_bytes_is_what_the_engine_allocates(tiny, block_size, num_blocks):
    loaded = lab.load(tiny, "cpu", policy_for(Path(tiny).parent))
    settings = lab.EngineSettings(block_size=block_size, num_blocks=num_blocks)
    config = loaded[1]
    by_hand = 2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim * 4  # K+V, float32
    assert lab.kv_pool_bytes(loaded, settings) == by_hand * block_size * num_blocks
    assert lab.kv_pool_bytes(loaded, settings) == lab.new_engine(loaded, tiny, settings).kv_cache_bytes
    with pytest.raises(ValueError, match="num blocks 0"):
        lab.kv_pool_bytes(loaded, lab.EngineSettings(num_blocks=0))


def test_the_pool_never_holds_more_than_its_budget_and_says_it_is_busy():
    pool = pool_of(100)
    alice, bob = pool.ticket(), pool.ticket()
    first = use(pool, alice, "k", 60)
    with pytest.raises(
        lab.PlaygroundBusyError, match=r"busy: 1 learners' engine holds 60 bytes of this server's 100 bytes"
    ):
        use(pool, bob, "k", 41)
    assert pool.used_bytes == 60 and pool.engines == 1 and pool.engine(alice) is first  # Alice keeps hers
    assert use(pool, bob, "k", 40) is not first and pool.used_bytes == 100  # exactly the budget fits
    with pytest.raises(
        ValueError, match=r"more than this server's playground holds .*100 bytes.*KVLAB_PLAYGROUND_KV_BYTES"
    ):
        use(pool, pool.ticket(), "k", 101)  # bigger than the whole budget: no point waiting
    assert not isinstance(_raised(lambda: use(pool, pool.ticket(), "k", 101)), lab.PlaygroundBusyError)


def _raised(fn) -> BaseException | None:
    try:
        fn()
    except BaseException as exc:  # noqa: BLE001 - the test looks at which one
        return exc
    return None


def test_a_learner_keeps_their_engine_until_the_settings_change():
    pool, built = pool_of(100), []

    def build():
        built.append(fake_engine())
        return built[-1]

    alice = pool.ticket()
    assert use(pool, alice, "a", 60, build) is use(pool, alice, "a", 60, build) is built[0]  # the prefix cache stays
    other = use(pool, alice, "b", 70, build)  # 60 + 70 > 100: her old engine goes first, so it fits
    assert other is built[1] and len(built) == 2 and pool.used_bytes == 70 and pool.engine(alice, "a") is None


def test_an_ended_session_frees_its_engine(tiny):
    loaded = lab.load(tiny, "cpu", policy_for(Path(tiny).parent))
    settings = lab.EngineSettings(block_size=4, num_blocks=9)
    pool, ticket = pool_of(10**9), None
    ticket = pool.ticket()
    with pool.lease(
        ticket, settings, lab.kv_pool_bytes(loaded, settings), lambda: lab.new_engine(loaded, tiny, settings)
    ) as llm:
        lab.generate(llm, ["def f(x):"], lab.sampling_params(4, 0.0, 1.0, 0, 0))
        cache = weakref.ref(llm.kv_cache.kv)  # the K/V tensor itself
    del llm
    assert pool.engines == 1 and cache() is not None
    del ticket  # Streamlit drops the session's state: the ticket, and with it the engine and its KV tensors
    assert pool.engines == 0 and pool.used_bytes == 0 and cache() is None


def test_idle_engines_are_freed_but_never_a_running_one():
    clock = Clock()
    pool = pool_of(100, clock=clock, idle_s=60.0)
    alice, bob = pool.ticket(), pool.ticket()
    use(pool, alice, "k", 50)
    with pool.lease(bob, "k", 50, fake_engine):
        clock.now += 59.0
        assert pool.sweep() == 0 and pool.engines == 2
        clock.now += 1.0
        assert pool.sweep() == 1 and pool.engine(alice) is None  # Alice's, unused for 60 s
        clock.now += 600.0
        assert pool.sweep() == 0 and pool.release(bob.id) is False  # Bob's is running: it stays
    assert pool.engines == 1
    clock.now += 60.0
    assert pool.sweep() == 1 and pool.used_bytes == 0


def test_a_full_pool_frees_idle_engines_to_make_room():
    clock = Clock()
    pool = pool_of(100, clock=clock, idle_s=60.0)
    alice, bob = pool.ticket(), pool.ticket()
    use(pool, alice, "k", 100)
    with pytest.raises(lab.PlaygroundBusyError):
        use(pool, bob, "k", 10)
    clock.now += 60.0  # no sweeper ran: the learner who needs room frees Alice's idle engine
    use(pool, bob, "k", 10)
    assert pool.engine(alice) is None and pool.used_bytes == 10


def test_a_waiting_learner_gets_the_room_an_ending_session_leaves():
    pool = lab.EnginePool(100, wait_s=60.0)
    alice, bob = pool.ticket(), pool.ticket()
    use(pool, alice, "k", 100)
    timer = threading.Timer(0.2, pool.release, (alice.id,))
    timer.start()
    try:
        assert use(pool, bob, "k", 100) is not None  # waited for Alice's engine to go, then built Bob's
    finally:
        timer.cancel()
    assert pool.engine(alice) is None and pool.used_bytes == 100


def test_the_engine_count_is_bounded_too_and_a_failed_build_gives_its_room_back():
    pool = pool_of(10**6, max_engines=2)
    tickets = [pool.ticket() for _ in range(3)]
    use(pool, tickets[0], "k", 1)
    with pytest.raises(RuntimeError, match="out of memory"):
        use(pool, tickets[1], "k", 10**5, lambda: (_ for _ in ()).throw(RuntimeError("out of memory")))
    assert pool.used_bytes == 1 and pool.engines == 1
    use(pool, tickets[1], "k", 1)
    with pytest.raises(lab.PlaygroundBusyError, match="2 learners' engines"):
        use(pool, tickets[2], "k", 1)


def test_a_second_run_of_one_session_never_takes_its_running_engine():
    pool = pool_of(100)
    alice = pool.ticket()
    with pool.lease(alice, "k", 10, fake_engine) as running:
        with pytest.raises(lab.PlaygroundBusyError, match="previous run is still stopping"):
            use(pool, alice, "other", 10)
        assert pool.engine(alice) is running


def test_the_pool_budget_from_the_environment():
    assert lab.EnginePool.from_env({}).budget_bytes == lab.DEFAULT_POOL_BYTES == 512 * 2**20
    assert lab.EnginePool.from_env({lab.POOL_BYTES_ENV: " 1048576 "}).budget_bytes == 2**20
    assert lab.EnginePool.from_env({}).idle_s == lab.IDLE_S == 180.0
    assert lab.EnginePool.from_env({lab.IDLE_ENV: "30"}).idle_s == 30.0
    for name in (lab.POOL_BYTES_ENV, lab.IDLE_ENV):
        for bad in ("0", "-5", "1e9", "2_000", "١٢", "lots"):
            with pytest.raises(ValueError, match=f"{name}={bad!r} must be a whole number"):
                lab.EnginePool.from_env({name: bad})


def test_the_sweeper_thread_frees_idle_engines_on_its_own():
    pool = lab.EnginePool(100, idle_s=0.0)
    ticket = pool.ticket()
    use(pool, ticket, "k", 10)
    try:
        pool.start_sweeper(interval_s=0.01)
        pool.start_sweeper(interval_s=0.01)  # once only
        assert sum(t.name == "kvlab-playground-sweeper" for t in threading.enumerate()) >= 1
        deadline = time.monotonic() + 60
        while pool.engines and time.monotonic() < deadline:
            time.sleep(0.01)
        assert pool.engines == 0  # nobody called sweep(): the thread did
    finally:
        pool.close()
    assert pool.engine(ticket) is None
