"""RewardScorer: sandboxed function components, model components, weights and shaping."""
from __future__ import annotations

import math

import pytest

from training.demo import EXACT_MATCH_SOURCE
from training.models import build_tiny_reward_model
from training.reward_client import RewardConfigError, RewardRequest, RewardScorer
from training.reward_mix import RewardMixError, mix, shape

FLAKY = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    if solution_str == "boom":
        raise ValueError("bad input")
    return {"score": 2.0, "note": "dict results are fine"}
'''


def _run_dir(tmp_path):
    (tmp_path / "reward").mkdir()
    (tmp_path / "reward" / "exact.py").write_text(EXACT_MATCH_SOURCE)
    (tmp_path / "reward" / "flaky.py").write_text(FLAKY)
    return tmp_path


def test_shaping():
    assert shape(0.5, "binary") == 1.0 and shape(0.49, "binary") == 0.0
    assert shape(3.0, "raw") == 3.0
    assert shape(0.0, "normalized") == 0.0 and -1 < shape(-5, "normalized") < shape(2, "normalized") < 1
    assert shape(2.0, "normalized") == pytest.approx(math.tanh(2.0))
    with pytest.raises(RewardMixError):
        shape(1.0, "sigmoid")


def test_mix_is_the_weighted_sum_of_usable_scores_then_the_shaping():
    m = mix([1.0, None, float("nan"), 0.2], [1.0, 3.0, 3.0, 0.5], "binary", [None, "boom", None, None],
            ["a", "b", "c", "d"])
    assert m.raw == pytest.approx(1.1) and m.score == 1.0 and m.error == "b: boom"
    assert m.components[:2] == [1.0, None]
    with pytest.raises(RewardMixError, match="2 component scores but 1 weights"):
        mix([1.0, 2.0], [1.0], "raw")
    with pytest.raises(RewardConfigError, match="reward.shaping must be one of"):
        RewardScorer({"shaping": "sigmoid", "components": [{"type": "function", "path": "x.py"}]}, "/nowhere")


def test_weighted_components_errors_and_model_scores(tmp_path):
    run = _run_dir(tmp_path)
    rm = build_tiny_reward_model(tmp_path / "rm", vocab="0123456789+= ", hidden=32, layers=1)
    reward = {"shaping": "raw", "components": [
        {"type": "function", "path": "reward/exact.py", "weight": 1.0},
        {"type": "function", "path": "reward/flaky.py", "name": "compute_score", "weight": 0.5},
        {"type": "model", "path": str(rm), "weight": 0.0},
    ]}
    with RewardScorer(reward, run) as scorer:
        ok, wrong, boom = scorer.score([RewardRequest("1+1=", "2", "2"), RewardRequest("1+1=", "3", "2"),
                                        RewardRequest("1+1=", "boom", "2")])
    assert ok.score == pytest.approx(1.0 + 0.5 * 2.0) and ok.error is None
    assert wrong.score == pytest.approx(0.5 * 2.0)
    assert boom.score == 0.0 and "bad input" in boom.error and boom.components[1] is None
    assert isinstance(ok.components[2], float)  # the model component ran (weight 0 keeps sums exact)


def test_function_components_run_in_the_sandbox(tmp_path):
    run = _run_dir(tmp_path)
    reward = {"shaping": "binary", "components": [{"type": "function", "path": "reward/exact.py"}]}
    with RewardScorer(reward, run) as scorer:
        assert scorer.backend == "sandbox"
        assert [r.score for r in scorer.score([RewardRequest("", "7", "7"), RewardRequest("", "8", "7")])] == [1.0, 0.0]


@pytest.mark.parametrize("reward,message", [
    ({"components": []}, "components is empty"),
    ({"shaping": "odd", "components": [{"type": "function", "path": "reward/exact.py"}]}, "shaping"),
    ({"components": [{"type": "script", "path": "x"}]}, "type must be"),
    ({"components": [{"type": "function", "path": "reward/missing.py"}]}, "does not exist"),
    ({"components": [{"type": "model", "path": "/nowhere"}]}, "not an HF model folder"),
    ({"components": [{"type": "function", "path": "reward/exact.py", "weight": "x"}]}, "not a number"),
])
def test_bad_reward_blocks_are_refused(tmp_path, reward, message):
    with pytest.raises(RewardConfigError, match=message):
        RewardScorer(reward, _run_dir(tmp_path))


def test_function_components_score_over_a_pool_sized_by_the_jobs_reward_workers(tmp_path):
    from training.local.config import HParams
    from training.sandbox import pool_size

    run = _run_dir(tmp_path)
    reward = {"shaping": "raw", "components": [{"type": "function", "path": "reward/exact.py"}]}
    reqs = [RewardRequest("", str(i % 5), "3") for i in range(200)]
    with RewardScorer(reward, run, workers=HParams(reward_workers=3).reward_workers) as scorer:
        assert [r.size for r in scorer._runners] == [3]
        assert [r.score for r in scorer.score(reqs)] == [1.0 if i % 5 == 3 else 0.0 for i in range(200)]
        assert len(scorer.slowest) == 5 and all(0 <= i < 200 and ms >= 0 for i, ms in scorer.slowest)
    assert RewardScorer(reward, run).workers == pool_size(None)  # blank: min(CPUs, 4)
    with pytest.raises(RewardConfigError, match="reward_workers must be a whole number from 1 to 64"):
        RewardScorer(reward, run, workers=0)
