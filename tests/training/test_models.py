"""Tiny offline models: build, save, reload, LoRA, sequence classification."""
from __future__ import annotations

import json

import pytest
import torch

from training.models import (
    build_tiny_model,
    build_tiny_reward_model,
    load_model_and_tokenizer,
    load_tokenizer,
    resolve_dtype,
)


def test_tiny_model_round_trips_with_a_char_tokenizer(tmp_path):
    out = build_tiny_model(tmp_path / "m", hidden=32, layers=1, seed=3)
    assert (out / "model.safetensors").exists()
    assert json.loads((out / "config.json").read_text())["architectures"] == ["Qwen2ForCausalLM"]
    tok = load_tokenizer(out)
    ids = tok("3+4= ok!", add_special_tokens=False).input_ids
    assert len(ids) == 8 and tok.decode(ids) == "3+4= ok!"  # spaces survive (gotcha 2)
    assert tok.padding_side == "left"
    model, _ = load_model_and_tokenizer(out)
    again = build_tiny_model(tmp_path / "m2", hidden=32, layers=1, seed=3)
    model2, _ = load_model_and_tokenizer(again)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), model2.parameters(), strict=True))  # seeded


def test_lora_wraps_only_adapters_as_trainable(tmp_path):
    out = build_tiny_model(tmp_path / "m", hidden=32, layers=1)
    model, _ = load_model_and_tokenizer(out, lora={"rank": 4, "alpha": 8, "targets": "all-linear"})
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)


def test_reward_model_gives_one_logit(tmp_path):
    out = build_tiny_reward_model(tmp_path / "rm", hidden=32, layers=1)
    model, tok = load_model_and_tokenizer(out, kind="seq_cls")
    enc = tok(["1+1=2", "2+2=5 "], return_tensors="pt", padding=True)
    assert model(**enc).logits.shape == (2, 1)


def test_bad_paths_and_dtypes_fail_clearly(tmp_path):
    with pytest.raises(FileNotFoundError, match="no HF model folder"):
        load_model_and_tokenizer(tmp_path)
    with pytest.raises(ValueError, match="hp.dtype"):
        resolve_dtype("float8", torch.device("cpu"))
    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32
