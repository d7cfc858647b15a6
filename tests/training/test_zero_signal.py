"""The zero-signal dry run on the tiny demo model: which prompts' sampled groups tie, and their share."""
from __future__ import annotations

import json

import pytest
import torch

from training import demo
from training.zero_signal import DryRunError, dry_run, group_verdict, main, summarize

# "T…" ground truths always score 1 and "F…" always 0 (ties: all right / all wrong); the others alternate
# 0, 1, 0, … call by call (one sandbox scores the batch in order), so their group never ties.
REWARD = '''
import itertools
_calls = itertools.count()

def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    if ground_truth.startswith("T"):
        return 1.0
    if ground_truth.startswith("F"):
        return 0.0
    return float(next(_calls) % 2)
'''


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return demo.build_demo_model(tmp_path_factory.mktemp("zs-model") / "demo-tiny", warmup_steps=20)


def write_request(tmp_path, model, truths, **over):
    (tmp_path / "reward.py").write_text(REWARD)
    rows = [{"index": 10 + i, "prompt": f"{i % 6}+{i % 5}=", "ground_truth": t, "data_source": "demo/arith"}
            for i, t in enumerate(truths)]
    (tmp_path / "prompts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    request = {"model": str(model), "device": "cpu", "prompts": "prompts.jsonl", "group_size": 4,
               "max_response_length": 3, "temperature": 1.0, "seed": 3, "batch_prompts": 4, "reward_workers": 1,
               "reward": {"components": [{"type": "function", "path": "reward.py", "name": "compute_score"}],
                          "shaping": "raw"}, **over}
    (tmp_path / "request.json").write_text(json.dumps(request))
    return tmp_path / "request.json"


def test_the_share_of_tied_prompts_and_which_they_are(tmp_path, model):
    truths = ["T1", "5", "F2", "7", "T3", "1", "F9", "F0", "3", "4"]  # 5 of 10 always tie
    request = write_request(tmp_path, model, truths)
    result = dry_run(request, tmp_path / "out.json", tmp_path / "progress.json")
    assert result["tied_share"] == pytest.approx(0.5)
    assert (result["tied"], result["all_right"], result["all_wrong"], result["counted"]) == (5, 2, 3, 10)
    tied = sorted(g["index"] for g in result["groups"] if g["tied"])
    assert tied == [10 + i for i, t in enumerate(truths) if t[0] in "TF"]
    assert all(len(g["rewards"]) == 4 for g in result["groups"])
    assert json.loads((tmp_path / "out.json").read_text())["tied"] == 5
    assert json.loads((tmp_path / "progress.json").read_text()) == {"done": 10, "total": 10}
    example = result["examples"][0]
    assert example["index"] == 10 and len(example["responses"]) == 4 and example["prompt"] == "0+0="


def test_group_verdicts_follow_the_guard_rules_tie_definition():
    assert group_verdict([1.0, 1.0, 1.0]) == (True, 1.0)
    assert group_verdict([0.0, 1.0]) == (False, None)
    assert group_verdict([0.5, None]) == (None, None)  # fewer than two usable rewards: not counted
    groups = [{"index": 0, "rewards": [1, 1], "tied": True, "value": 1.0},
              {"index": 1, "rewards": [0, 0], "tied": True, "value": 0.0},
              {"index": 2, "rewards": [0, 1], "tied": False, "value": None},
              {"index": 3, "rewards": [None, None], "tied": None, "value": None}]
    s = summarize(groups, 2)
    assert (s["tied_share"], s["all_right"], s["all_wrong"], s["uncounted"]) == (pytest.approx(2 / 3), 1, 1, [3])


def test_a_wrong_request_is_refused_with_the_reason(tmp_path, model, capsys):
    with pytest.raises(DryRunError, match="group_size must be"):
        dry_run(write_request(tmp_path, model, ["T"], group_size=1), tmp_path / "out.json")
    with pytest.raises(DryRunError, match="temperature"):
        dry_run(write_request(tmp_path, model, ["T"], temperature=0), tmp_path / "out.json")
    assert main(["--request", str(write_request(tmp_path, tmp_path / "nope", ["T"])),
                 "--out", str(tmp_path / "o.json")]) == 2
    assert "does not exist" in capsys.readouterr().err
