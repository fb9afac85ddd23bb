"""engine/model/loader.py: safetensors-only loading of local Hugging Face folders, and its error messages."""

from __future__ import annotations

import gc
import json
import os
import re
import shutil
import traceback
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from engine.model.access import ModelAccessError
from engine.model.config import ModelConfig
from engine.model.llama import CausalLM
from engine.model.loader import DEMO_DIR, INDEX_FILE, ModelTooLargeError, hf_state_dict, load_config, load_model
from engine.model.tokenizer import FILENAME as KVLAB_TOKENIZER
from engine.model.tokenizer import ByteBPETokenizer
from tests.engine.model.reference_llama import reference_logits

transformers = pytest.importorskip("transformers")

TINY = dict(
    vocab_size=61,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    tie_word_embeddings=False,
)


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory):
    """A tiny random LlamaForCausalLM saved with save_pretrained (safetensors); returns (path, HF model)."""
    path = tmp_path_factory.mktemp("llama")
    torch.manual_seed(0)
    hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(**TINY)).eval()
    hf.save_pretrained(path)
    return path, hf


def copy_folder(src, dst):
    """Copy a model folder file by file (so each test can damage its own copy)."""
    dst.mkdir(exist_ok=True)
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    return dst


def logits_equal(ours, hf, ids: torch.Tensor) -> None:
    with torch.no_grad():
        torch.testing.assert_close(reference_logits(ours, ids), hf(ids).logits, atol=1e-5, rtol=1e-4)


def test_loads_weights_exactly(hf_folder):
    path, hf = hf_folder
    model, config, tokenizer = load_model(path)
    assert tokenizer is None  # no tokenizer files were saved
    assert config.num_key_value_heads == 2 and config.head_dim == 8
    ours = hf_state_dict(model)  # the fused q/k/v and gate/up rows under the checkpoint's names
    assert set(ours) == set(hf.state_dict())
    for name, p in hf.state_dict().items():
        assert torch.equal(ours[name], p), name
    logits_equal(model, hf, torch.randint(0, 61, (1, 20)))


def test_sharded_checkpoint(tmp_path, hf_folder):
    _, hf = hf_folder
    hf.save_pretrained(tmp_path, max_shard_size="20KB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    model, _, _ = load_model(tmp_path)
    logits_equal(model, hf, torch.randint(0, 61, (2, 9)))


def test_dtype_is_honoured(hf_folder):
    model, _, _ = load_model(hf_folder[0], dtype=torch.bfloat16)
    assert model.lm_head.weight.dtype == torch.bfloat16
    assert model.inv_freq.dtype == torch.float32  # positions stay exact


def test_missing_folder_and_files(tmp_path, hf_folder):
    with pytest.raises(FileNotFoundError, match="does_not_exist"):
        load_model(tmp_path / "does_not_exist")
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_model(tmp_path)
    (tmp_path / "config.json").write_text((hf_folder[0] / "config.json").read_text())
    with pytest.raises(FileNotFoundError, match="no \\*.safetensors"):
        load_model(tmp_path)
    (tmp_path / "pytorch_model.bin").write_bytes(b"not unpickled")
    with pytest.raises(FileNotFoundError, match="pytorch_model.bin.*refuses to unpickle"):
        load_model(tmp_path)


def test_bad_config_json(tmp_path, hf_folder):
    folder = copy_folder(hf_folder[0], tmp_path / "m")
    (folder / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="config.json is not valid JSON"):
        load_model(folder)
    cfg = json.loads((hf_folder[0] / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(cfg | {"architectures": ["BertForMaskedLM"]}))
    with pytest.raises(ValueError, match="'BertForMaskedLM' is not supported"):
        load_model(folder)
    del cfg["hidden_size"]
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="missing required key 'hidden_size'"):
        load_model(folder)


def test_missing_and_mismatched_tensors(tmp_path, hf_folder):
    folder = copy_folder(hf_folder[0], tmp_path / "m")
    weights = load_file(folder / "model.safetensors")
    broken = {k: v for k, v in weights.items() if k != "model.layers.1.mlp.up_proj.weight"}
    save_file(broken, folder / "model.safetensors")
    with pytest.raises(ValueError, match="missing 'model.layers.1.mlp.up_proj.weight'"):
        load_model(folder)
    save_file(weights | {"model.norm.weight": torch.ones(31)}, folder / "model.safetensors")
    with pytest.raises(ValueError, match=r"'model.norm.weight' has shape \(31,\) but the config implies \(32,\)"):
        load_model(folder)
    save_file(weights | {"model.extra.weight": torch.ones(2)}, folder / "model.safetensors")
    with pytest.raises(ValueError, match="'model.extra.weight' does not belong"):
        load_model(folder)


def test_missing_shard_is_named(tmp_path, hf_folder):
    hf_folder[1].save_pretrained(tmp_path, max_shard_size="20KB")
    shard = sorted(tmp_path.glob("model-*.safetensors"))[0]
    shard.unlink()
    with pytest.raises(FileNotFoundError, match=shard.name):
        load_model(tmp_path)


def test_transformers4_and_5_config_dialects_agree(tmp_path):
    rope = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    v4 = {"architectures": ["LlamaForCausalLM"], **TINY, "rope_theta": 500000.0, "rope_scaling": rope}
    v5 = {"architectures": ["LlamaForCausalLM"], **TINY, "rope_parameters": rope | {"rope_theta": 500000.0}}
    a, b = ModelConfig.from_hf(v4), ModelConfig.from_hf(v5)
    assert a == b and a.rope_theta == 500000.0 and a.rope_scaling["rope_type"] == "llama3"
    plain = ModelConfig.from_hf(
        {
            "architectures": ["LlamaForCausalLM"],
            **TINY,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1234.0},
        }
    )
    assert plain.rope_theta == 1234.0 and plain.rope_scaling is None
    (tmp_path / "config.json").write_text(json.dumps(v5 | {"head_dim": 16}))
    assert load_config(tmp_path).head_dim == 16  # explicit head_dim wins over hidden_size / heads


def test_qwen2_window_only_when_enabled():
    base = {"architectures": ["Qwen2ForCausalLM"], **TINY, "sliding_window": 32}
    assert ModelConfig.from_hf(base).sliding_window is None
    assert ModelConfig.from_hf(base | {"use_sliding_window": True}).sliding_window == 32
    assert ModelConfig.from_hf(base).qkv_bias and not ModelConfig.from_hf(base).o_bias


def test_demo_folder_loads():
    model, config, tokenizer = load_model("demo")
    assert isinstance(tokenizer, ByteBPETokenizer)
    assert config.vocab_size == tokenizer.vocab_size
    assert config.num_key_value_heads < config.num_attention_heads  # the demo is a GQA model
    assert sum(f.stat().st_size for f in DEMO_DIR.glob("*.safetensors")) <= 10 * 2**20
    ids = torch.tensor([tokenizer.encode("def __init__(self")])
    with torch.no_grad():
        assert torch.isfinite(reference_logits(model, ids)).all()


def test_demo_folder_is_a_real_hf_checkpoint():
    # The same folder loads in transformers and gives the same logits: the demo uses the real-checkpoint path.
    hf = transformers.LlamaForCausalLM.from_pretrained(DEMO_DIR, dtype=torch.float32).eval()
    ours, _, tokenizer = load_model("demo")
    logits_equal(ours, hf, torch.tensor([tokenizer.encode("import sys\n\ndef main():\n")]))


def test_hf_tokenizer_json_is_used_when_tokenizers_is_installed(tmp_path, hf_folder):
    tokenizers = pytest.importorskip("tokenizers")
    folder = copy_folder(hf_folder[0], tmp_path / "m")
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, "hello": 3, "world": 4}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.decoder = tokenizers.decoders.WordPiece()
    tok.save(str(folder / "tokenizer.json"))
    _, config, loaded = load_model(folder)
    assert loaded.encode("hello world") == [3, 4]
    assert loaded.encode("hello", add_bos=True) == [config.bos_token_id, 3]
    assert loaded.eos_token_id == config.eos_token_ids[0] == 2
    assert loaded.decode([3, 4]) == "hello world"


# ---- allowed roots: the folder and every file the loader opens must resolve under one -------------------------


def outside_file(tmp_path, hf_folder, name="model.safetensors"):
    """A real file of the checkpoint placed outside the root, for links and index names to point at."""
    out = tmp_path / "outside"
    out.mkdir(exist_ok=True)
    (out / name).write_bytes((hf_folder[0] / name).read_bytes())
    return out / name


@pytest.fixture
def root(tmp_path, hf_folder):
    """An allowed root holding one good copy of the checkpoint, sharded (index + shards)."""
    root = tmp_path / "models"
    root.mkdir()
    hf_folder[1].save_pretrained(root / "sharded", max_shard_size="20KB")
    return root


def refused(what: str) -> str:
    return f"^{what} is not a readable file or folder inside the folders this server allows$"


def set_weight_map(folder, target: str) -> None:
    """Point the index's entry for the last shard at `target` (as written in the JSON)."""
    index = folder / INDEX_FILE
    raw = json.loads(index.read_text())
    last = sorted(set(raw["weight_map"].values()))[-1]
    raw["weight_map"] = {k: (target if v == last else v) for k, v in raw["weight_map"].items()}
    index.write_text(json.dumps(raw))


def test_roots_allow_their_folders_and_links_that_stay_inside(root, hf_folder):
    model, _, _ = load_model(root / "sharded", allowed_roots=[root])
    logits_equal(model, hf_folder[1], torch.randint(0, 61, (1, 7)))
    blobs = root / "blobs"  # the Hugging Face cache layout: snapshot files are links into blobs/
    shutil.copytree(hf_folder[0], blobs)
    snap = root / "snapshots" / "main"
    snap.mkdir(parents=True)
    for f in blobs.iterdir():
        (snap / f.name).symlink_to(Path("..", "..", "blobs", f.name))
    (root / "alias").symlink_to(snap)
    load_model(root / "alias", allowed_roots=[str(root)])
    assert load_model("demo", allowed_roots=[])[2] is not None  # the demo is always allowed


def test_folders_outside_the_roots_get_one_answer(tmp_path, root, hf_folder):
    evil = tmp_path / "models-evil"  # shares the root's name as a string prefix
    copy_folder(hf_folder[0], evil)
    (root / "link").symlink_to(evil)
    (root / "file").write_text("x")
    os.mkfifo(root / "fifo")
    for path in (
        evil,
        root / "link",
        root / "sharded" / ".." / ".." / "models-evil",
        root / "missing",
        tmp_path / "missing",
        root / "file",
        root / "fifo",
        "/etc",
        "/root",
        "/proc/self",
        "~root",
        tmp_path / "models" / "sharded" / INDEX_FILE,
    ):
        with pytest.raises(ModelAccessError, match=refused("that model folder")):
            load_model(path, allowed_roots=[root])
    with pytest.raises(ModelAccessError):
        load_model(root / "sharded", allowed_roots=[])  # nothing allowed but the demo
    assert load_model(evil)[0] is not None  # without roots: a library user's own folder loads as before


@pytest.mark.parametrize("exists", [True, False])
@pytest.mark.parametrize("how", ["dotdot", "absolute", "link", "link-dir"])
def test_shards_named_outside_the_roots_are_refused(tmp_path, root, hf_folder, how, exists):
    hf_folder[1].save_pretrained(tmp_path / "outside", max_shard_size="20KB")
    folder = root / "sharded"
    shard = sorted(folder.glob("model-*.safetensors"))[-1].name
    target = tmp_path / "outside" / shard
    if not exists:
        target.unlink()
    name = {"dotdot": f"../../outside/{shard}", "absolute": str(target), "link": shard, "link-dir": f"sub/{shard}"}[how]
    if how == "link":
        (folder / shard).unlink()
        (folder / shard).symlink_to(target)
    else:
        set_weight_map(folder, name)
    if how == "link-dir":
        (folder / "sub").symlink_to(tmp_path / "outside")
    with pytest.raises(ModelAccessError, match=refused(f"shard '{re.escape(name)}' named by {INDEX_FILE}")):
        load_model(folder, allowed_roots=[root])  # the same answer whether the target exists or not


@pytest.mark.parametrize("name", ["config.json", INDEX_FILE, "model.safetensors", "tokenizer.json", KVLAB_TOKENIZER])
def test_every_other_file_is_checked_too(tmp_path, root, hf_folder, name):
    folder = copy_folder(hf_folder[0], root / "single")
    elsewhere = tmp_path / "outside" / name
    elsewhere.parent.mkdir(exist_ok=True)
    source = folder / name if (folder / name).exists() else None
    elsewhere.write_bytes(source.read_bytes() if source else b"{}")
    (folder / name).unlink(missing_ok=True)
    (folder / name).symlink_to(elsewhere)
    with pytest.raises(ModelAccessError, match=refused(f"{re.escape(name)} in that folder")):
        load_model(folder, allowed_roots=[root])
    assert load_model(folder, allowed_roots=[tmp_path]) if name == "model.safetensors" else True


def test_a_fifo_or_a_folder_where_a_file_belongs_is_refused_without_hanging(root, hf_folder):
    folder = copy_folder(hf_folder[0], root / "odd")
    (folder / "config.json").unlink()
    os.mkfifo(folder / "config.json")  # opening it for reading without O_NONBLOCK would wait for a writer
    with pytest.raises(ModelAccessError, match=refused("config.json in that folder")):
        load_model(folder, allowed_roots=[root])
    with pytest.raises(ModelAccessError):
        load_model(folder)  # a library user gets the same protection
    (folder / "config.json").unlink()
    (folder / "config.json").write_text((hf_folder[0] / "config.json").read_text())
    (folder / "model.safetensors").unlink()
    (folder / "model.safetensors").mkdir()
    with pytest.raises(ModelAccessError, match=refused("model.safetensors in that folder")):
        load_model(folder, allowed_roots=[root])


def test_max_bytes_checks_the_files_and_the_memory_at_the_load_dtype(tmp_path, hf_folder):
    folder = tmp_path / "bf16"
    hf_folder[1].to(torch.bfloat16).save_pretrained(folder)
    hf_folder[1].to(torch.float32)
    disk = (folder / "model.safetensors").stat().st_size
    with pytest.raises(ModelTooLargeError, match="the weights on disk take .* KiB, more than the limit of"):
        load_model(folder, max_bytes=disk - 1)
    with pytest.raises(ModelTooLargeError, match="the weights in memory as float32 take") as info:
        load_model(folder, max_bytes=disk)  # bf16 on disk, float32 in memory: twice the bytes
    params = sum(p.numel() for p in hf_folder[1].parameters())
    assert 4 * params <= info.value.size < 4 * params + 1024 and info.value.limit == disk
    model, _, _ = load_model(folder, dtype=torch.bfloat16, max_bytes=disk)
    assert model.lm_head.weight.dtype == torch.bfloat16


def causal_lms() -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if type(o) is CausalLM)


@pytest.mark.parametrize("damage", ["shape", "garbage"])
def test_a_load_failing_on_the_last_shard_keeps_no_model_alive(root, damage):
    folder = root / "sharded"
    last = sorted(folder.glob("model-*.safetensors"))[-1]
    if damage == "shape":
        tensors = load_file(last)
        key = sorted(tensors)[-1]
        save_file(tensors | {key: torch.ones(3, 3)}, last)
    else:
        last.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{garbage")
    before = causal_lms()
    error = ValueError if damage == "shape" else Exception
    with pytest.raises(error) as info:
        load_model(folder, allowed_roots=[root])
    if damage == "shape":
        assert str(last) in str(info.value) and "has shape (3, 3)" in str(info.value)
    assert causal_lms() == before  # while the error (and its traceback) is still held
    weights = [f for f in (fr.f_locals for fr, _ in traceback.walk_tb(info.value.__traceback__)) if "net" in f]
    assert weights == []
