"""Pair generation for a blind comparison: both sides on the same prompts with the same sampling."""
from __future__ import annotations

import json
import shutil

import pytest

from training import pairgen
from training.demo import DEMO_VOCAB
from training.models import build_tiny_model

ROWS = [{"prompt": "1+2=", "ground_truth": "3"}, {"prompt": "4+4=", "ground_truth": "8", "data_source": "d"}]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("pairgen")
    base = build_tiny_model(root / "base", vocab=DEMO_VOCAB, hidden=32, layers=1, max_positions=64, seed=0)
    other = build_tiny_model(root / "other", vocab=DEMO_VOCAB, hidden=32, layers=1, max_positions=64, seed=1)
    ckpt = root / "run" / "checkpoints" / "global_step_10"
    shutil.copytree(other, ckpt / "model")
    (ckpt / "manifest.json").write_text(json.dumps({"step": 10, "format": "local", "lora": False}))
    return base, ckpt


def test_the_same_model_on_both_sides_gives_the_same_greedy_responses(models):
    base, _ckpt = models
    pairs = pairgen.generate_pairs(ROWS, base, base, max_new_tokens=6, temperature=0.0, seed=3, device="cpu")
    assert [p["id"] for p in pairs] == [0, 1] and [p["seed"] for p in pairs] == [3, 4]
    assert all(p["a"] == p["b"] for p in pairs)
    assert pairs[1]["ground_truth"] == "8" and pairs[1]["data_source"] == "d" and pairs[0]["prompt"] == "1+2="


def test_a_checkpoint_against_the_base_through_the_cli(models, tmp_path, capsys):
    base, ckpt = models
    (tmp_path / "prompts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    args = ["--prompts", str(tmp_path / "prompts.jsonl"), "--policy", str(ckpt), "--opponent", str(base),
            "--base-model", str(base), "--out", str(tmp_path / "pairs.jsonl"), "--max-new-tokens", "16",
            "--temperature", "1.0", "--device", "cpu"]
    assert pairgen.main(args) == 0
    pairs = [json.loads(line) for line in (tmp_path / "pairs.jsonl").read_text().splitlines()]
    assert len(pairs) == 2 and all(isinstance(p["a"], str) and isinstance(p["b"], str) for p in pairs)
    assert any(p["a"] != p["b"] for p in pairs)  # two different models, the same seeds: different samples
    assert [p["seed"] for p in pairs] == [0, 1]
    assert pairgen.main(args[:3] + [str(tmp_path / "missing")] + args[4:]) == 2
    assert "does not exist" in capsys.readouterr().err
