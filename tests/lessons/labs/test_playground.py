"""lessons/playground_lab.py: prompt and folder validation, runs on shared weights, step traces as rows."""

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.llm import LLM
from engine.sampling import SamplingParams
from lessons.labs import playground as lab
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
@given(st.lists(st.text(st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")), min_size=1, max_size=40)
                .map(str.strip).filter(bool), min_size=1, max_size=lab.MAX_PROMPTS))  # fmt: skip
def test_parse_prompts_round_trips_lines(prompts):
    assert lab.parse_prompts("\n".join(prompts) + "\n\n") == prompts


def test_resolve_model_validates_folders(tmp_path, tiny):
    assert lab.resolve_model("folder", f"  {tiny} ") == tiny
    with pytest.raises(ValueError, match="empty"):
        lab.resolve_model("folder", "   ")
    with pytest.raises(ValueError, match="not a folder"):
        lab.resolve_model("folder", str(tmp_path / "nope"))
    with pytest.raises(ValueError, match="no config.json"):
        lab.resolve_model("folder", str(tmp_path))
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "pytorch_model.bin").write_text("")
    with pytest.raises(ValueError, match="no \\*.safetensors"):
        lab.resolve_model("folder", str(tmp_path))
    with pytest.raises(ValueError, match="unknown model source"):
        lab.resolve_model("hub", "meta-llama/x")
    demo_ready = any(lab.DEMO_DIR.glob("*.safetensors"))
    if demo_ready:
        assert lab.resolve_model("demo") == "demo"
    else:
        with pytest.raises(ValueError, match="demo model's weights are not installed"):
            lab.resolve_model("demo")


def test_corrupt_weights_are_a_value_error(tmp_path, tiny):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text((Path(tiny) / "config.json").read_text())
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ValueError, match="could not load"):
        lab.load(lab.resolve_model("folder", str(broken)), "cpu")


def test_sampling_params_limits():
    assert lab.sampling_params(4, 0.0, 1.0, 0, 3) == SamplingParams(max_tokens=4, temperature=0.0, seed=3)
    with pytest.raises(ValueError, match="max tokens 65"):
        lab.sampling_params(65, 0.0, 1.0, 0, None)
    with pytest.raises(ValueError, match="top_p"):
        lab.sampling_params(4, 0.0, 0.0, 0, None)


def test_small_pool_run_matches_solo_runs_and_rows_add_up(tiny):
    loaded = lab.load(tiny, "cpu")
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
    assert run.generated_tokens == 40 and run.tokens_per_s > 0
    for i, t in enumerate(run.traces):
        view = lab.step_view(run, i)
        assert sum(len(tbl) for tbl in view.tables.values()) <= t.num_blocks - t.num_free_blocks
        for name, table in view.tables.items():
            assert len(view.fills[name]) == len(table) and all(1 <= f <= 4 for f in view.fills[name])
        assert f"{t.num_blocks - t.num_free_blocks} of 9 blocks" in view.story
    assert any("Preempted" in lab.step_view(run, i).story for i in range(len(run.traces)))
    with pytest.raises(ValueError, match="does not exist"):
        lab.step_view(run, len(run.traces))
    with pytest.raises(ValueError, match="num blocks 0"):
        lab.new_engine(loaded, tiny, lab.EngineSettings(num_blocks=0))
