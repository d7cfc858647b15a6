"""What reward code prints is kept in the rollout store beside each sample's score, on both backends."""
from __future__ import annotations

import json

from training import ingest, rollouts
from training.backends.verl_reward import make_compute_score
from training.local.train import run_job

PRINTING = '''\
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    text = str(solution_str).strip()
    if text:
        print(f"compared {text!r} with {ground_truth!r}")
    return 1.0 if text == str(ground_truth).strip() else 0.0
'''


def test_the_local_trainer_stores_what_each_reward_printed_for_each_sample(make_run):
    run = make_run("grpo", max_steps=2, test_freq=0, save_freq=0)
    (run / "reward" / "talkative.py").write_text(PRINTING)
    spec = json.loads((run / "job.json").read_text())
    spec["reward"] = {"shaping": "raw", "components": [
        {"type": "function", "path": "reward/exact_match.py", "name": "compute_score", "weight": 1.0},
        {"type": "function", "path": "reward/talkative.py", "name": "compute_score", "weight": 0.0}]}
    (run / "job.json").write_text(json.dumps(spec))
    run_job(run, run / "metrics.jsonl")
    rows = ingest.read_samples(run, "rollout", 2)
    assert rows
    for r in rows:
        text = str(r["output"]).strip()
        want = {"talkative": f"compared {text!r} with {str(r['gts'])!r}\n"} if text else {}
        assert r["reward_logs"] == want  # the silent exact_match has none


def test_verls_reward_wrapper_returns_what_the_reward_printed_and_the_dump_keeps_it(tmp_path):
    (tmp_path / "talkative.py").write_text(PRINTING)
    config = {"shaping": "raw", "sandbox": {}, "reward_workers": 1, "loop_workers": 1,
              "components": [{"type": "function", "name": "talkative", "source_path": str(tmp_path / "talkative.py"),
                              "function": "compute_score", "weight": 1.0}]}
    (tmp_path / "reward.json").write_text(json.dumps(config))
    compute_score = make_compute_score(str(tmp_path / "reward.json"))
    said = compute_score(data_source="arith", solution_str="7", ground_truth="7", extra_info={})
    quiet = compute_score(data_source="arith", solution_str="", ground_truth="7", extra_info={})
    assert said["log/talkative"] == "compared '7' with '7'\n" and said["score"] == 1.0
    assert quiet["log/talkative"] == "" and set(said) == set(quiet)  # VERL needs the same keys from every sample
    # VERL's rollout dump writes the returned keys as columns; the store reads them back per component
    dump = [{"input": "3+4=", "output": "7", "gts": "7", "score": 1.0, "step": 1, **said},
            {"input": "3+4=", "output": "", "gts": "7", "score": 0.0, "step": 1, **quiet}]
    rows = rollouts.normalize(dump, step=1)
    assert [r["reward_logs"] for r in rows] == [{"talkative": "compared '7' with '7'\n"}, {}]
    assert "log/talkative" not in rows[0]["extras"].get("talkative", {})
