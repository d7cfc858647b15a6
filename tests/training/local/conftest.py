"""Tiny demo models built once per test session, and a helper that writes demo run dirs."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from training import demo


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def demo_models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    return {
        "policy": demo.build_demo_model(root / "demo-tiny"),
        "teacher": demo.build_demo_teacher(root / "demo-teacher", steps=150),
        "rm_base": demo.build_demo_reward_base(root / "demo-rm-base"),
    }


@pytest.fixture
def make_run(tmp_path, demo_models):
    """make_run(kind, name="run", **hp_overrides) -> run dir with the demo-cpu preset."""

    def make(kind: str, name: str = "run", **hp) -> Path:
        model = demo_models["rm_base"] if kind == "reward_model" else demo_models["policy"]
        return demo.write_demo_run(tmp_path / name, kind, model, demo_models["teacher"], hp_overrides=hp)

    return make


def _read_metrics(path: Path) -> dict[int, dict]:
    out: dict[int, dict] = {}
    for line in Path(path).read_text().splitlines():
        rec = json.loads(line)
        out.setdefault(rec["step"], {}).update(rec["data"])
    return out


@pytest.fixture
def read_metrics():
    """read_metrics(path) -> {step: data} of a VERL file-logger JSONL (a later line wins)."""
    return _read_metrics
