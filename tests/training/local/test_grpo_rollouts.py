"""The local GRPO trainer's rollout store and per-component reward series, on a real short run.

The plotted total must be what was optimised: the test records the scores handed to VERL's
compute_grpo_outcome_advantage and compares the logged series and the stored rows with them.
"""
from __future__ import annotations

import json
import math

import pytest
import torch

from training import ingest, rollouts
from training.local.train import run_job

SHAPE_SOURCE = '''\
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    text = str(solution_str).strip()
    if text.endswith("3"):
        raise ValueError("no threes")
    return {"score": 1.0 if text.isdigit() else 0.0, "chars": float(len(text))}
'''
WEIGHTS = {"exact_match": 2.0, "shape": -0.5}


@pytest.fixture
def mixed_run(make_run):
    run = make_run("grpo", max_steps=5, test_freq=0, save_freq=0, rollout_keep_last=2, rollout_keep_every=3)
    (run / "reward" / "shape.py").write_text(SHAPE_SOURCE)
    spec = json.loads((run / "job.json").read_text())
    spec["reward"] = {"shaping": "raw", "components": [
        {"type": "function", "path": "reward/exact_match.py", "name": "compute_score", "weight": 2.0},
        {"type": "function", "path": "reward/shape.py", "name": "compute_score", "weight": -0.5}]}
    (run / "job.json").write_text(json.dumps(spec))
    return run


def test_logged_total_components_and_rows_match_what_was_optimised(mixed_run, read_metrics, monkeypatch):
    from verl.trainer.ppo import core_algos

    seen: list[list[float]] = []
    real = core_algos.compute_grpo_outcome_advantage

    def recording(token_level_rewards, response_mask, index, *args, **kwargs):
        seen.append(token_level_rewards.sum(-1).tolist())
        return real(token_level_rewards, response_mask, index, *args, **kwargs)

    monkeypatch.setattr(core_algos, "compute_grpo_outcome_advantage", recording)
    run_job(mixed_run, mixed_run / "metrics.jsonl")
    m = read_metrics(mixed_run / "metrics.jsonl")
    assert len(seen) == 5
    for step, scores in enumerate(seen, 1):
        optimised = sum(scores) / len(scores)
        assert m[step][rollouts.TOTAL_METRIC] == pytest.approx(optimised, abs=1e-6)
        assert m[step]["critic/score/mean"] == pytest.approx(optimised, abs=1e-6)

    # retention: the last 2 steps and every 3rd older one stay
    assert rollouts.steps(mixed_run) == [3, 4, 5]
    assert not rollouts.summary_path(mixed_run, 2).exists()  # gone with its dump
    errors_seen = 0
    for step in (3, 4, 5):
        rows = ingest.read_samples(mixed_run, "rollout", step)
        scores = seen[step - 1]
        assert [r["score"] for r in rows] == pytest.approx(scores, abs=1e-6)
        # the total is the weighted sum of the components (a failed one counts 0): the weights are in it
        for r in rows:
            parts = [WEIGHTS[n] * v for n, v in r["components"].items() if v is not None]
            assert r["score"] == pytest.approx(sum(parts), abs=1e-6)
            assert (r["components"]["shape"] is None) == ("shape" in r["errors"])
            assert r["output"].strip().endswith("3") == ("shape" in r["errors"])
            assert r["response_length"] == len(r["tokens"]) == len(r["token_logratio"])
            assert len(r["token_entropy"]) == len(r["token_logprob_diff"]) == r["response_length"]
            # an entropy is never negative; the sampler and the training pass see the same weights (fp32)
            assert all(e >= 0 for e in r["token_entropy"]) and max(r["token_entropy"], default=1) > 0
            assert all(abs(d) < 1e-3 for d in r["token_logprob_diff"])
            assert isinstance(r["truncated"], bool)
        errors_seen += sum("shape" in r["errors"] for r in rows)
        # advantages: group-normalised score, as VERL computes it (unbiased std, epsilon 1e-6)
        by_uid: dict[str, list[dict]] = {}
        for r in rows:
            by_uid.setdefault(r["uid"], []).append(r)
        assert len(by_uid) == 16 and all(len(g) == 8 for g in by_uid.values())
        for group in by_uid.values():
            assert sorted(r["sample_index"] for r in group) == list(range(8))
            s = torch.tensor([r["score"] for r in group])
            want = (s - s.mean()) / (s.std() + 1e-6)
            assert [r["advantage"] for r in group] == pytest.approx(want.tolist(), abs=1e-5)
        # per-component series and garbled-output shares: logged by the trainer, and the same when ingest derives
        # them from the dump
        assert 0 <= m[step]["training/rollout_probs_diff_max"] < 1e-3  # VERL's name, VERL's maths
        n = len(rows)
        exact = [r["components"]["exact_match"] for r in rows]
        assert m[step]["reward/exact_match/mean"] == pytest.approx(sum(exact) / n)
        assert m[step]["reward/exact_match/error_share"] == 0.0
        assert m[step]["reward/shape/error_share"] == pytest.approx(sum("shape" in r["errors"] for r in rows) / n)
        ok_chars = [r["extras"]["shape"]["chars"] for r in rows if "shape" in r["extras"]]
        assert m[step]["reward/shape/chars/mean"] == pytest.approx(sum(ok_chars) / len(ok_chars))
        derived = ingest.rollout_metrics(mixed_run, step)
        # read from the summary the trainer wrote beside the dump, which holds what the dump gives
        assert json.loads(rollouts.summary_path(mixed_run, step).read_text())["metrics"] == derived
        assert derived == ingest.compute_rollout_metrics(mixed_run, step)
        for key, value in derived.items():
            if key.startswith(("reward/", "garbled/")):
                assert m[step][key] == pytest.approx(value) or (value is None and m[step][key] is None), key
    assert errors_seen > 0, "the run must exercise a failing component"
    assert all(math.isfinite(v) for v in m[5].values() if isinstance(v, float))
