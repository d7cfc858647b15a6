"""Reward code in training (local backend's RewardScorer, the VERL reward wrapper) cannot read the app's data
folders: another project's run directory is simply not there, wherever RUNS_ROOT lives."""
from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import pytest

from training.backends.verl_reward import FunctionComponent
from training.reward_client import RewardRequest, RewardScorer
from training.sandbox import isolation

PEEK = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    try:
        with open(ground_truth, "rb") as f:
            return 1.0 + f.read(1)[0]  # the first byte leaks through the score
    except OSError:
        return 0.0
'''


@pytest.fixture
def other_projects_run_file():
    """A world-readable file in a data folder outside /tmp, $HOME and the checkout (like the compose volume)."""
    if isolation.isolation_info()["mode"] != "bubblewrap":
        pytest.skip("only bubblewrap hides folders")
    root = Path("/var/lib") / f"workbench-test-{uuid.uuid4().hex[:8]}"
    try:
        path = root / "runs" / "other-project" / "job-7" / "checkpoints" / "secret.bin"
        path.parent.mkdir(parents=True)
    except OSError:
        pytest.skip("cannot create a folder under /var/lib here")
    try:
        for d in [root, *[p for p in path.parents if str(p).startswith(str(root))]]:
            os.chmod(d, 0o755)
        path.write_bytes(b"Z-weights")
        os.chmod(path, 0o644)
        yield path
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_local_backend_reward_cannot_read_another_projects_run_dir(tmp_path, other_projects_run_file):
    (tmp_path / "peek.py").write_text(PEEK)
    reward = {"components": [{"type": "function", "path": "peek.py", "weight": 1.0}], "shaping": "raw"}
    with RewardScorer(reward, tmp_path) as scorer:
        assert scorer.backend == "sandbox"
        out = scorer.score([RewardRequest(prompt="p", response="r", ground_truth=str(other_projects_run_file))])
    assert out[0].error is None and out[0].raw == 0.0  # not 1 + ord("Z")


def test_verl_reward_wrapper_cannot_read_another_projects_run_dir(other_projects_run_file):
    comp = FunctionComponent("peek", PEEK, "compute_score", {})
    try:
        [(score, _, error, _)] = comp.score_batch([{"data_source": "x", "solution_str": "r",
                                                 "ground_truth": str(other_projects_run_file), "extra_info": None}])
    finally:
        comp.close()
    assert error is None and score == 0.0
