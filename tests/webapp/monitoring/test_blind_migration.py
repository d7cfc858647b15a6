"""The move to one blind-task model, forward from an old database: an arena and human evaluations (an on-demand
one vs the references, a periodic one vs an earlier checkpoint) with their pairs, verdicts and judges, written at
the migration before the move, come out of 0012 as blind tasks with the same verdicts by side, human evaluations
under their old ids, and every pair with a secret of its own."""
from __future__ import annotations

import pytest

from tests.migration_support import migrate_app_to

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = ("monitoring", "0009_diagnostic_bundle")  # the last migration before the move


@pytest.fixture
def old_apps():
    # every other app as it is now (their rows must be valid today), monitoring from before the move
    apps = migrate_app_to(BEFORE)
    yield apps
    migrate_app_to(None)  # leave the database as the others expect


def _old_data(apps):
    User = apps.get_model("auth", "User")
    Project = apps.get_model("core", "Project")
    Job = apps.get_model("runs", "Job")
    Checkpoint = apps.get_model("runs", "Checkpoint")
    Task = apps.get_model("monitoring", "HumanEvalTask")
    Item = apps.get_model("monitoring", "HumanEvalItem")
    Verdict = apps.get_model("monitoring", "HumanVerdict")
    Arena = apps.get_model("monitoring", "Arena")
    Pair = apps.get_model("monitoring", "ArenaPair")
    Judgement = apps.get_model("monitoring", "ArenaJudgement")
    JudgeRun = apps.get_model("monitoring", "JudgeRun")
    rita = User.objects.create(username="rita")
    rob = User.objects.create(username="rob")
    project = Project.objects.create(slug="acme", name="Acme")
    job = Job.objects.create(project=project, name="run", kind="grpo", config={})
    c5 = Checkpoint.objects.create(job=job, step=5, path="/runs/x/global_step_5")
    c10 = Checkpoint.objects.create(job=job, step=10, path="/runs/x/global_step_10")
    # an on-demand evaluation (vs the references), open, anyone may judge; ids leave a gap before it
    Task.objects.create(pk=40, project=project, checkpoint=c5, title="gone", source="s")
    Task.objects.filter(pk=40).delete()
    manual = Task.objects.create(pk=41, project=project, checkpoint=c10, title="Run #1 run · step 10",
                                 source="validation samples at step 10")
    # the policy was shown on the left in item 0 and on the right in item 1
    i0 = Item.objects.create(task=manual, index=0, prompt="1+1=", policy_response="2", reference_response="3",
                             policy_side="a", policy_score=1.0, reference_score=0.0, auto_outcome=1.0)
    i1 = Item.objects.create(task=manual, index=1, prompt="2+2=", policy_response="5", reference_response="4",
                             policy_side="b", auto_outcome=0.0, ground_truth="4", data_source="arith")
    Verdict.objects.create(item=i0, reviewer=rita, choice="a", outcome=1.0)  # pressed left = the policy
    Verdict.objects.create(item=i1, reviewer=rita, choice="a", outcome=0.0)  # pressed left = the reference
    Verdict.objects.create(item=i1, reviewer=rob, choice="tie", outcome=0.5)
    # a periodic one (vs step 5), closed and flagged, assigned to rob
    periodic = Task.objects.create(pk=42, project=project, checkpoint=c10, title="step 10 vs step 5", source="val",
                                   scheduled=True, opponent="step 5", opponent_step=5, is_open=False,
                                   gap={"flagged": True, "rise": 0.5}, status="ready")
    periodic.assignees.set([rob])
    Item.objects.create(task=periodic, index=0, prompt="q", policy_response=" same  answer", policy_side="b",
                        reference_response="same answer")
    JudgeRun.objects.create(task=periodic, kind="reward", label="reward of run #1", status="succeeded", wins=1, n=1)
    # an arena: two pairs, one verdict
    chat = [{"role": "user", "content": "x"}]
    arena = Arena.objects.create(project=project, title="5 vs 10", sides={"a": {"label": "step 5"},
                                                                        "b": {"label": "step 10"}},
                                 a_checkpoint=c5, b_checkpoint=c10, prompts=["1+2=", chat],
                                 sampling={"max_new_tokens": 4}, seed=7, status="succeeded", progress=1.0)
    p0 = Pair.objects.create(arena=arena, index=0, prompt="1+2=", prompt_text="1+2=", response_a="4", response_b="3",
                             seed=7)
    Pair.objects.create(arena=arena, index=1, prompt=[{"role": "user", "content": "x"}], prompt_text="user: x",
                        response_a="y", response_b="y", seed=8)
    Judgement.objects.create(pair=p0, reviewer=rita, choice="b", shown_left="a")
    JudgeRun.objects.create(arena=arena, kind="judge_model", label="judge", status="succeeded", ties=2, n=2)


def test_arenas_and_human_evaluations_become_blind_tasks(old_apps):
    _old_data(old_apps)
    migrate_app_to(None)

    from webapp.monitoring.blind_results import blind_results
    from webapp.monitoring.models import BlindTask, BlindVerdict, JudgeRun

    manual, periodic = BlindTask.objects.get(pk=41), BlindTask.objects.get(pk=42)
    assert (manual.source, periodic.source) == ("checkpoint", "periodic")  # ids kept
    assert manual.is_open and manual.anyone_may_judge and manual.status == "succeeded"
    assert manual.sides["a"]["kind"] == "reference" and manual.sides["b"]["step"] == 10
    p0, p1 = manual.pairs.order_by("index")
    assert (p0.response_b, p0.response_a, p0.score_b, p0.auto_outcome) == ("2", "3", 1.0, 1.0)  # B is the policy
    assert (p1.ground_truth, p1.data_source) == ("4", "arith")
    # rita preferred the policy on item 0 and the reference on item 1; she saw the policy left, then right
    assert [(v.choice, v.shown_left) for v in BlindVerdict.objects.filter(pair__task=manual, reviewer__username="rita")
            .order_by("pair__index")] == [("b", "b"), ("a", "a")]
    assert BlindVerdict.objects.get(pair=p1, reviewer__username="rob").choice == "tie"

    assert not periodic.is_open and periodic.closed_at and periodic.gap["flagged"]
    assert periodic.opponent == "step 5" and periodic.opponent_step == 5 and periodic.a_checkpoint.step == 5
    assert [u.username for u in periodic.assignees.all()] == ["rob"] and not periodic.anyone_may_judge
    assert periodic.pairs.get().identical  # " same  answer" vs "same answer"
    assert JudgeRun.objects.get(label="reward of run #1").task == periodic

    arena = BlindTask.objects.get(source="arena")
    assert arena.pk > 42 and arena.title == "5 vs 10" and arena.seed == 7 and arena.anyone_may_judge
    assert arena.prompts[1]["prompt"] == [{"role": "user", "content": "x"}] and arena.prompts[0]["ground_truth"] is None
    a0, a1 = arena.pairs.order_by("index")
    assert (a0.response_a, a0.response_b, a0.seed, a1.identical) == ("4", "3", 7, True)
    assert [(v.reviewer.username, v.choice, v.shown_left) for v in a0.verdicts.all()] == [("rita", "b", "a")]
    assert JudgeRun.objects.get(label="judge").task == arena
    keys = list(BlindTask.objects.values_list("pairs__order_key", flat=True))
    assert len(keys) == 5 and len(set(keys)) == 5 and all(len(k) == 32 for k in keys)

    res = blind_results(arena)
    assert (res.outcome["b"].count, res.identical, res.b.n) == (1, 1, 2)
    new = BlindTask.objects.create(project=arena.project, source="arena", title="after")
    assert new.pk > arena.pk  # the id sequence follows the ids given explicitly
