"""engine/model/loader.py: safetensors-only loading of local Hugging Face folders, and its error messages."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from engine.model.config import ModelConfig
from engine.model.loader import DEMO_DIR, load_config, load_model
from engine.model.tokenizer import ByteBPETokenizer
from tests.engine.model.reference_llama import reference_logits

transformers = pytest.importorskip("transformers")

TINY = dict(
    vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=False,
)  # fmt: skip


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
    for name, p in hf.state_dict().items():
        assert torch.equal(model.state_dict()[name], p), name
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
    rope = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192}  # fmt: skip
    v4 = {"architectures": ["LlamaForCausalLM"], **TINY, "rope_theta": 500000.0, "rope_scaling": rope}
    v5 = {"architectures": ["LlamaForCausalLM"], **TINY, "rope_parameters": rope | {"rope_theta": 500000.0}}
    a, b = ModelConfig.from_hf(v4), ModelConfig.from_hf(v5)
    assert a == b and a.rope_theta == 500000.0 and a.rope_scaling["rope_type"] == "llama3"
    plain = ModelConfig.from_hf({"architectures": ["LlamaForCausalLM"], **TINY, "rope_parameters": {
        "rope_type": "default", "rope_theta": 1234.0}})  # fmt: skip
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
