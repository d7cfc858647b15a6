"""Training's reward calls fail closed on both backends: where bubblewrap cannot run, the local backend's
RewardScorer and VERL's reward wrapper refuse (the run stops with why and how to fix it) instead of scoring
with the host's files in reach; an operator's opt-in runs the reward, never as root."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

from training.backends.verl_reward import make_compute_score
from training.reward_client import RewardRequest, RewardScorer
from training.sandbox import SandboxUnavailable, isolation

SAMPLE = {"data_source": "arith", "solution_str": "7", "ground_truth": "7", "extra_info": {}}


def snooping_reward(marker) -> str:
    """Loads by writing a file (it can without isolation) and reports who it runs as."""
    return (f"import os\nopen({str(marker)!r}, 'w').write('ran')\n"
            "def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n"
            "    return {'score': float(solution_str == ground_truth), 'uid': os.getuid()}\n")


def local_scorer(tmp_path, marker) -> RewardScorer:
    (tmp_path / "reward").mkdir(exist_ok=True)
    (tmp_path / "reward" / "snoop.py").write_text(snooping_reward(marker))
    return RewardScorer({"shaping": "raw", "components": [{"type": "function", "path": "reward/snoop.py"}]}, tmp_path,
                        workers=2)


def verl_compute_score(tmp_path, marker):
    (tmp_path / "snoop.py").write_text(snooping_reward(marker))
    config = {"shaping": "raw", "sandbox": {}, "reward_workers": 2, "loop_workers": 1,
              "components": [{"type": "function", "name": "snoop", "source_path": str(tmp_path / "snoop.py"),
                              "function": "compute_score", "weight": 1.0}]}
    (tmp_path / "reward.json").write_text(json.dumps(config))
    return make_compute_score(str(tmp_path / "reward.json"))


def test_the_local_backends_reward_refuses_to_run_without_isolation(broken_bwrap, tmp_path):
    marker = tmp_path / "ran"
    with pytest.raises(SandboxUnavailable, match="Permission denied") as refused, local_scorer(tmp_path, marker):
        pass
    assert "apt-get install bubblewrap" in str(refused.value)
    assert not marker.exists()


def test_verls_reward_wrapper_refuses_to_run_without_isolation(broken_bwrap, tmp_path):
    marker = tmp_path / "ran"
    compute_score = verl_compute_score(tmp_path, marker)
    with pytest.raises(SandboxUnavailable, match="Permission denied"):
        compute_score(**SAMPLE)
    assert not marker.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="what root does")
def test_opted_in_the_training_reward_runs_but_not_as_root(broken_bwrap, monkeypatch, tmp_path):
    monkeypatch.setenv(isolation.ALLOW_UNISOLATED, isolation.UNISOLATED_CONSENT)
    monkeypatch.setattr(isolation, "_others_can_reach", lambda path: True)  # uid 65534 may run this interpreter
    shared = tempfile.TemporaryDirectory(prefix="reward-marker-", dir="/tmp")  # uid 65534 may write here
    os.chmod(shared.name, 0o777)
    marker = Path(shared.name) / "ran"
    with local_scorer(tmp_path, marker) as scorer:
        res = scorer.score([RewardRequest(prompt="3+4=", response="7", ground_truth="7")])[0]
    assert res.error is None and res.score == 1.0 and res.extras[0] == {"uid": 65534}
    assert marker.exists() and marker.stat().st_uid == 65534
    marker.unlink()
    out = verl_compute_score(tmp_path, marker)(**SAMPLE)
    assert out["score"] == 1.0 and out["reward_error"] == 0.0 and marker.stat().st_uid == 65534
    shared.cleanup()
