"""The arena services: two demo checkpoints answer the same prompts with recorded seeds, reviewers judge
blind, results (once closed) keep wins / ties / losses apart, and the verdicts become a preference dataset
version that a reward-model job trains on."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from django.conf import settings

from training import demo
from webapp.core.services import ApplicationError
from webapp.datasets.models import DatasetRow
from webapp.monitoring.blind_results import blind_results, majority
from webapp.monitoring.models import BlindTask, BlindVerdict, EvaluationStatus
from webapp.monitoring.services.arena import arena_create, arena_generate, side_choices
from webapp.monitoring.services.arena_export import arena_export, export_rows
from webapp.monitoring.services.blind import left_side, next_pair_for, task_set_open, verdict_record
from webapp.registry.models import ModelEntry, ModelKind
from webapp.runs.models import Checkpoint, Job, JobKind, JobState

PROMPTS = [f"{a}+{b}=" for a in range(3) for b in range(4)][:10]


@pytest.fixture(scope="module")
def arena_models(tmp_path_factory) -> dict[str, Path]:
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("arena-models")
    return {"policy": demo.build_demo_model(root / "demo-tiny", warmup_steps=80),
            "teacher": demo.build_demo_teacher(root / "teacher", steps=150),
            "rm_base": demo.build_demo_reward_base(root / "rm-base")}


def demo_run(project, models: dict[str, Path]) -> tuple[Job, Checkpoint, Checkpoint, ModelEntry]:
    """A finished demo GRPO run with two checkpoints: the format-only base (step 10) and one that knows sums."""
    base = ModelEntry.objects.create(project=project, name="demo-tiny", kind=ModelKind.CAUSAL_LM,
                                     path=str(models["policy"]))
    job = Job.objects.create(project=project, name="demo", kind=JobKind.GRPO, state=JobState.SUCCEEDED,
                             base_model=base, config={"hp": {}})
    job.run_dir = str(Path(settings.RUNS_ROOT) / f"job-{job.pk}")
    job.save(update_fields=["run_dir"])
    ckpts = []
    for step, src in ((10, models["policy"]), (20, models["teacher"])):
        path = Path(job.run_dir) / "checkpoints" / f"global_step_{step}"
        shutil.copytree(src, path / "model")
        for f in (path / "model").glob("tokenizer*"):
            f.unlink()  # as the local trainer saves them: the run's tokenizer is the base model's
        (path / "manifest.json").write_text(json.dumps({"step": step, "format": "local", "lora": False}))
        ckpts.append(Checkpoint.objects.create(job=job, step=step, path=str(path)))
    return job, ckpts[0], ckpts[1], base


@pytest.fixture
def generated(project, engineer, arena_models) -> BlindTask:
    _job, c10, c20, _base = demo_run(project, arena_models)
    arena = arena_create(project=project, user=engineer, side_a=f"ckpt:{c10.pk}", side_b=f"ckpt:{c20.pk}",
                         prompts=PROMPTS, sampling={"max_response_length": 4, "temperature": 0.7}, seed=123)
    return arena_generate(arena_id=arena.pk)


def test_both_sides_answer_with_the_same_settings_and_recorded_seeds(generated):
    arena = generated
    assert arena.status == EvaluationStatus.SUCCEEDED, arena.error
    assert arena.engine == "transformers" and arena.progress == 1.0
    pairs = list(arena.pairs.all())
    assert [p.prompt for p in pairs] == PROMPTS and [p.seed for p in pairs] == [123 + i for i in range(10)]
    assert arena.source == "arena" and arena.anyone_may_judge and [r["prompt"] for r in arena.prompts] == PROMPTS
    # the step-20 checkpoint knows the sums; the step-10 one only the format
    right_b = sum(p.response_b.strip() == str(eval(p.prompt[:-1])) for p in pairs)
    right_a = sum(p.response_a.strip() == str(eval(p.prompt[:-1])) for p in pairs)
    assert right_b >= 7 and right_b > right_a
    assert arena.sides["a"]["step"] == 10 and arena.sides["b"]["step"] == 20
    assert arena.sides["a"]["base_model"] == arena.sides["b"]["base_model"]
    assert arena_generate(arena_id=arena.pk).pairs.count() == 10  # a redelivered task does nothing


def test_a_pair_can_be_generated_again_from_its_seed(generated):
    from training.generation import load_generator

    pair = generated.pairs.get(index=4)
    side = generated.sides["a"]
    with load_generator(side["path"], base_model=side["base_model"], device="cpu") as gen:
        again = gen.generate([pair.prompt], seed=pair.seed, **generated.sampling)[0][0]
    assert again.text == pair.response_a


def pick(pair, user, side: str) -> str:
    """The key a reviewer presses to pick `side` wherever it is shown to them."""
    return "left" if left_side(pair, user) == side else "right"


def test_blind_judging_records_the_side_shown_left_and_results_keep_ties_apart(generated, reviewer, reviewer2,
                                                                               engineer):
    pairs = [p for p in generated.pairs.all() if not p.identical]
    assert len(pairs) >= 8  # the two checkpoints disagree on most sums
    lefts = {left_side(p, reviewer) for p in pairs}
    assert lefts == {"a", "b"}  # random per pair
    for p in pairs[:6]:  # rita prefers B wherever it was shown
        verdict_record(pair=p, reviewer=reviewer, choice=pick(p, reviewer, "b"))
    verdict_record(pair=pairs[6], reviewer=reviewer, choice="tie")
    verdict_record(pair=pairs[7], reviewer=reviewer, choice="both_bad")
    j = BlindVerdict.objects.get(pair=pairs[0], reviewer=reviewer)
    assert j.choice == "b" and j.shown_left == left_side(pairs[0], reviewer)
    for p in pairs[:2]:  # rob agrees on one pair, not on the other
        verdict_record(pair=p, reviewer=reviewer2, choice="tie")
    verdict_record(pair=pairs[0], reviewer=reviewer2, choice=pick(pairs[0], reviewer2, "b"))
    res = blind_results(generated)
    assert res.judged_pairs == 8 and res.judgements == 10
    # pair 1: rita B, rob tie -> an even split, counted as a tie
    assert (res.outcome["b"].count, res.outcome["tie"].count, res.outcome["both_bad"].count,
            res.outcome["a"].count) == (5, 2, 1, 0)
    assert res.split_pairs == 1
    assert res.decisive.n == 5 and res.decisive.rate == 1.0 and res.decisive.lo < 0.6  # 5 of 5: still wide
    assert res.too_few
    rita = next(r for r in res.reviewers if r["reviewer"] == "rita")
    assert rita["judged"] == 8 and rita["b"] == 6 and rita["shared"] == 2 and rita["agreement"] == 0.5
    assert res.exportable == 7
    nxt = next_pair_for(generated, reviewer)
    assert (nxt.index if nxt else None) == (pairs[8].index if len(pairs) > 8 else None)
    with pytest.raises(ApplicationError, match="Choose one of"):
        verdict_record(pair=pairs[0], reviewer=reviewer, choice="a")
    task_set_open(task=generated, user=engineer, is_open=False)
    with pytest.raises(ApplicationError, match="closed"):
        verdict_record(pair=pairs[-1], reviewer=reviewer, choice="tie")


def test_majority_rule():
    assert majority(["a", "a", "b"]) == ("a", False)
    assert majority(["a", "b"]) == ("tie", True)
    assert majority(["both_bad"]) == ("both_bad", False)


def test_export_is_a_preference_version_with_provenance_that_a_reward_model_job_trains_on(
        generated, project, engineer, reviewer, arena_models, no_enqueue, fake_supervisor):
    from training.local.train import run_job
    from webapp.runs.services import job_create, job_launch

    pairs = [p for p in generated.pairs.all() if not p.identical]
    for p in pairs:  # B better but on the last two pairs: a tie and a both-bad
        choice = {pairs[-2].index: "tie", pairs[-1].index: "both_bad"}.get(p.index, pick(p, reviewer, "b"))
        verdict_record(pair=p, reviewer=reviewer, choice=choice)
    usable = [p for p in pairs[:-2] if p.response_a.strip() and p.response_b.strip()]
    assert len(usable) >= 4  # the two checkpoints disagree on most sums
    rows, skipped = export_rows(generated)
    assert len(rows) == len(usable) and sum(skipped.values()) == len(pairs) - 2 - len(usable)
    with pytest.raises(ApplicationError, match="Close the arena first"):
        arena_export(arena=generated, user=engineer)
    task_set_open(task=generated, user=engineer, is_open=False)
    version = arena_export(arena=generated, user=engineer)
    assert version.dataset.kind == "preference" and version.row_count == len(usable)
    assert version.dataset.name == f"arena-{generated.pk}-preferences"
    row = DatasetRow.objects.filter(version=version).order_by("index").first()
    assert row.chosen == usable[0].response_b and row.rejected == usable[0].response_a
    info = row.extra_info
    assert info["pair"] == usable[0].index
    assert info["reviewer"] == "rita" and info["seed"] == 123 and info["chosen_side"] == "b"
    assert info["chosen_model"]["step"] == 20 and info["rejected_model"]["step"] == 10
    assert info["sampling"]["max_response_length"] == 4 and info["shown_left"] in ("a", "b")
    assert arena_export(arena=generated, user=engineer).number == 2  # a second export: a new version

    rm_base = ModelEntry.objects.create(project=project, name="rm-base", kind=ModelKind.REWARD_MODEL,
                                        path=str(arena_models["rm_base"]))
    job = job_create(project=project, user=engineer, kind="reward_model", backend="local", preset="demo-cpu",
                     hp_overrides={"max_steps": 3, "save_freq": 3, "test_freq": 3}, dataset_version=version,
                     reward_spec=None, base_model=rm_base, include_unreviewed=True)
    assert job_launch(job.pk) == "launched"
    job.refresh_from_db()
    train = [json.loads(x) for x in (Path(job.run_dir) / "data" / "train.jsonl").read_text().splitlines()]
    assert len(train) + job.data_manifest["counts"]["val"] == len(usable) and {"chosen", "rejected"} <= set(train[0])
    run_job(Path(job.run_dir), Path(job.run_dir) / "metrics.jsonl")
    lines = [json.loads(x) for x in (Path(job.run_dir) / "metrics.jsonl").read_text().splitlines()]
    assert any("rm/loss" in ln["data"] or "rm/val_accuracy" in ln["data"] for ln in lines)


def test_refusals_store_nothing(project, engineer, arena_models, outsider):
    _job, c10, c20, base = demo_run(project, arena_models)
    cases = [
        ({"side_a": "ckpt:999999", "side_b": f"ckpt:{c20.pk}"}, "not in this project"),
        ({"side_a": f"ckpt:{c10.pk}", "side_b": f"ckpt:{c10.pk}"}, "two different"),
        ({"side_a": "nonsense", "side_b": f"ckpt:{c20.pk}"}, "Choose a checkpoint"),
        ({"side_a": f"ckpt:{c10.pk}", "side_b": f"model:{base.pk}", "prompts": []}, "at least one prompt"),
        ({"side_a": f"ckpt:{c10.pk}", "side_b": f"model:{base.pk}", "sampling": {"top_p": 0}}, "Top-p"),
        ({"side_a": f"ckpt:{c10.pk}", "side_b": f"model:{base.pk}", "sampling": {"temperature": "hot"}}, "numbers"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ApplicationError, match=message):
            arena_create(project=project, user=engineer, **{"prompts": PROMPTS, **kwargs})
    assert BlindTask.objects.count() == 0
    values = [v for v, _ in side_choices(project)]
    assert values == [f"ckpt:{c20.pk}", f"ckpt:{c10.pk}", f"model:{base.pk}"]
