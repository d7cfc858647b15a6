"""Fixtures for the VERL backend tests: a tiny offline model and run directories in VERL's shape."""
from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

# A chat template for the char tokenizer: VERL's dataset and rollout apply one to every prompt.
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)

EXACT_MATCH = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    hit = float(solution_str.strip() == str(ground_truth).strip())
    return {"score": hit, "exact": hit, "length": float(len(solution_str))}
'''

LENGTH_PENALTY = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    if solution_str == "boom":
        raise ValueError("user bug")
    return -0.1 * len(solution_str)
'''

BASE_SPEC: dict[str, Any] = {
    "job_id": "17", "kind": "grpo", "backend": "verl",
    "model": {"path": "MODEL", "name": "demo-tiny"},
    "data": {"train": "data/train.jsonl", "val": "data/val.jsonl"},
    "reward": {"shaping": "raw", "components": [
        {"type": "function", "path": "reward/exact_match.py", "name": "compute_score", "weight": 1.0}]},
    "hp": {"lr": 1e-6, "kl_coef": 0.02, "kl_loss_type": "low_var_kl", "batch_size": 64, "epochs": 3,
           "max_steps": None, "max_prompt_length": 512, "max_response_length": 1536, "max_seq_len": 2048,
           "group_size": 4, "temperature": 1.0, "clip_ratio": 0.2, "loss_agg_mode": "token-mean",
           "lora": {"rank": 0, "alpha": 16, "targets": "all-linear"},
           "save_freq": 10, "test_freq": 5, "seed": 1, "keep_last_k": 3},
    "verl": {"rollout_engine": "vllm", "n_gpus_per_node": 1, "nnodes": 1, "use_v1": True},
    "sandbox": {"time_limit_s": 5, "batch_time_limit_s": 120, "memory_mb": 1024},
}


def arithmetic_rows(n: int, offset: int = 0) -> list[dict[str, Any]]:
    rows = []
    for i in range(offset, offset + n):
        a, b = divmod(i, 10)
        rows.append({"prompt": f"{a}+{b}=", "ground_truth": str(a + b), "data_source": "arith",
                     "ability": "math", "extra_info": {"a": a, "b": b}, "reference": str(a + b)})
    return rows


def compose_verl(overrides: list[str]):
    """Compose verl's ppo_trainer.yaml with `overrides`, as `python -m verl.trainer.main_ppo` does."""
    import os

    import verl
    from hydra import compose, initialize_config_dir

    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


@pytest.fixture
def verl_compose() -> Callable[[list[str]], Any]:
    return compose_verl


@pytest.fixture
def base_spec() -> dict[str, Any]:
    """A fresh copy of the demo GRPO job spec (docs/run-directory.md), model path not filled in."""
    return copy.deepcopy(BASE_SPEC)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A random tiny Qwen2 with a char tokenizer that has a chat template (built offline)."""
    from training.models import build_tiny_model, load_tokenizer

    path = build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", hidden=32, layers=1)
    tok = load_tokenizer(path)
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(path)
    return path


@pytest.fixture
def make_run(tmp_path, tiny_model_dir) -> Callable[..., tuple[dict[str, Any], Path]]:
    """Return `make(spec_updates=None, n_train=80, n_val=20)` -> (spec, run_dir) on disk."""

    def make(updates: dict[str, Any] | None = None, n_train: int = 80, n_val: int = 20,
             name: str = "run") -> tuple[dict[str, Any], Path]:
        run_dir = tmp_path / name
        (run_dir / "data").mkdir(parents=True)
        (run_dir / "reward").mkdir()
        (run_dir / "reward" / "exact_match.py").write_text(EXACT_MATCH)
        (run_dir / "reward" / "length_penalty.py").write_text(LENGTH_PENALTY)
        for split, rows in (("train", arithmetic_rows(n_train)), ("val", arithmetic_rows(n_val, n_train))):
            (run_dir / "data" / f"{split}.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
        spec = copy.deepcopy(BASE_SPEC)
        spec["model"]["path"] = str(tiny_model_dir)
        for key, value in (updates or {}).items():
            if isinstance(value, dict) and isinstance(spec.get(key), dict):
                spec[key].update(value)
            else:
                spec[key] = value
        (run_dir / "job.json").write_text(json.dumps(spec, indent=1))
        return spec, run_dir

    return make
