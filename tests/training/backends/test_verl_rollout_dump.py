"""A VERL rollout dump, written by VERL's own writer from our reward wrapper's outputs, read back as
rollout-store rows and per-component series with the names the local trainer logs."""
from __future__ import annotations

import json
import math
from collections import defaultdict

import pytest
import torch

from training import ingest, rollouts
from training.backends.verl import VerlBackend


def _verl_dump(run_dir, step, samples, outputs):
    """What RayPPOTrainer._log_rollout_data writes: its columns plus every reward_extra_info key."""
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    extra = defaultdict(list)
    for out in outputs:  # the reward loop's naive manager: every key of the returned dict
        for key, value in out.items():
            extra[key].append(value)
    RayPPOTrainer._write_generations(
        inputs=[s["prompt"] for s in samples], outputs=[s["solution_str"] for s in samples],
        gts=[s["ground_truth"] for s in samples], scores=[o["score"] for o in outputs],
        reward_extra_infos_dict=dict(extra), dump_path=str(ingest.RunDir(run_dir).samples_dir("rollout")),
        global_steps=step)


def test_a_verl_dump_becomes_rollout_rows_and_component_series(make_run):
    from verl.utils.import_utils import load_extern_object

    reward = {"shaping": "raw", "components": [
        {"type": "function", "path": "reward/exact_match.py", "weight": 1.0},
        {"type": "function", "path": "reward/length_penalty.py", "weight": 0.5}]}
    spec, run_dir = make_run({"reward": reward})
    VerlBackend().prepare(run_dir, 1)
    compute_score = load_extern_object(str(run_dir / "verl" / "reward_fn.py"), "compute_score")
    answers = {"1+2=": ["3", "4", "boom"], "2+2=": ["4", "4", "44"]}
    # balance_batch reorders rows: the groups must be found again by their prompt
    samples = [{"prompt": p, "solution_str": a, "ground_truth": str(eval(p[:-1]))}  # noqa: S307 - "a+b" literals
               for i in range(3) for p, answers_ in answers.items() for a in [answers_[i]]]
    outputs = compute_score.batch(["arith"] * len(samples), [s["solution_str"] for s in samples],
                                  [s["ground_truth"] for s in samples],
                                  [{"split": "train", "index": i} for i in range(len(samples))])
    _verl_dump(run_dir, 7, samples, outputs)

    rows = ingest.read_samples(run_dir, "rollout", 7)
    assert [r["output"] for r in rows] == [s["solution_str"] for s in samples]
    groups = defaultdict(list)
    for r in rows:
        groups[r["uid"]].append(r)
    assert sorted(len(g) for g in groups.values()) == [3, 3]
    for group in groups.values():
        assert len({r["input"] for r in group}) == 1 and [r["sample_index"] for r in group] == [0, 1, 2]
        s = torch.tensor([r["score"] for r in group], dtype=torch.float64)
        want = (s - s.mean()) / (s.std() + 1e-6)  # VERL's GRPO outcome advantage
        assert [r["advantage"] for r in group] == pytest.approx(want.tolist(), abs=1e-6)
    boom = next(r for r in rows if r["output"] == "boom")
    assert boom["components"] == {"exact_match": 0.0, "length_penalty": None}
    assert set(boom["errors"]) == {"length_penalty"} and boom["score"] == 0.0
    hit = next(r for r in rows if r["output"] == "3")
    assert hit["components"] == {"exact_match": 1.0, "length_penalty": pytest.approx(-0.1)}
    assert hit["extras"] == {"exact_match": {"exact": 1.0, "length": 1.0}}
    assert hit["score"] == pytest.approx(1.0 + 0.5 * -0.1)
    assert hit["response_length"] is None and hit["truncated"] is None  # not in VERL's dump

    m = ingest.rollout_metrics(run_dir, 7)
    assert m["reward/exact_match/mean"] == pytest.approx(3 / 6)  # "3" for 1+2, "4" twice for 2+2
    assert m["reward/exact_match/error_share"] == 0.0
    assert m["reward/length_penalty/error_share"] == pytest.approx(1 / 6)
    lengths = [len(s["solution_str"]) for s in samples if s["solution_str"] != "boom"]
    assert m["reward/length_penalty/mean"] == pytest.approx(-0.1 * sum(lengths) / 5)
    assert m["reward/exact_match/length/mean"] == pytest.approx(sum(len(s["solution_str"]) for s in samples) / 6)
    # the raw file is VERL's (NaN where a component failed); the store's reader fills in the rest
    raw = [json.loads(line) for line in (run_dir / "samples" / "rollout" / "7.jsonl").read_text().splitlines()]
    assert math.isnan(next(r for r in raw if r["output"] == "boom")["r/length_penalty"])
    assert "uid" not in raw[0] and rollouts.STORE_KEYS - set(rollouts.TOKEN_KEYS) - {"prompt_length"} <= set(rows[0])
