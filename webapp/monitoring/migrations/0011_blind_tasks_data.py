# One blind pairwise-judging model (step 2 of 3): copy every human evaluation and arena into blind tasks.
#
# Side B is the one under test: a human evaluation's policy (its checkpoint), an arena's B. Side A is what it is
# compared with: the reference, the earlier checkpoint or base model, an arena's A. Human evaluations keep their
# ids (links in sent notifications name them); arenas are numbered after them. Every pair gets a fresh secret
# for the order reviewers see it in; verdicts keep the side chosen and the side that was shown on the left.

import secrets

from django.core.management.color import no_style
from django.db import migrations

STATUS = {"generating": "queued", "preparing": "running", "ready": "succeeded", "failed": "failed"}
BY_OUTCOME = {1.0: "b", 0.5: "tie", 0.0: "a"}  # a human verdict's outcome is the policy's (side B's)


def _identical(a, b):
    return " ".join((a or "").split()) == " ".join((b or "").split())


def _pair(BlindPair, task, index, a, b, **fields):
    return BlindPair(task=task, index=index, response_a=a, response_b=b, identical=_identical(a, b),
                     order_key=secrets.token_hex(16), **fields)


def _copy_human_evals(apps):
    HumanEvalTask = apps.get_model("monitoring", "HumanEvalTask")
    BlindTask = apps.get_model("monitoring", "BlindTask")
    BlindPair = apps.get_model("monitoring", "BlindPair")
    BlindVerdict = apps.get_model("monitoring", "BlindVerdict")
    Checkpoint = apps.get_model("runs", "Checkpoint")
    JudgeRun = apps.get_model("monitoring", "JudgeRun")
    for old in HumanEvalTask.objects.select_related("checkpoint__job").order_by("pk"):
        ckpt = old.checkpoint
        b = {"kind": "checkpoint", "label": f"step {ckpt.step}", "checkpoint": ckpt.pk, "job": ckpt.job_id,
             "step": ckpt.step, "path": ckpt.path}
        earlier = None
        if old.opponent_step is None:
            a = {"kind": "reference", "label": "reference"}
        elif old.opponent_step == 0:
            base = ckpt.job.base_model_id
            a = {"kind": "model", "label": old.opponent, "model": base, "step": 0}
        else:
            earlier = Checkpoint.objects.filter(job_id=ckpt.job_id, step=old.opponent_step).first()
            a = {"kind": "checkpoint", "label": old.opponent, "step": old.opponent_step, "job": ckpt.job_id,
                 "checkpoint": earlier.pk if earlier else None, "path": earlier.path if earlier else ""}
        assignees = list(old.assignees.all())
        task = BlindTask.objects.create(
            pk=old.pk, project_id=old.project_id, source="periodic" if old.scheduled else "checkpoint",
            title=old.title, sides={"a": a, "b": b}, b_checkpoint=ckpt, a_checkpoint=earlier,
            a_model_id=a.get("model"), origin=old.source, status=STATUS.get(old.status, "failed"), error=old.error,
            progress=1.0 if old.status == "ready" else 0.0, is_open=old.is_open,
            closed_at=None if old.is_open else old.updated_at, anyone_may_judge=not assignees, gap=old.gap,
            flagged_at=old.flagged_at, created_by_id=old.created_by_id,
            sampling={"max_new_tokens": 64, "temperature": 0.0, "top_p": 1.0} if old.scheduled else {})
        task.assignees.set(assignees)
        BlindTask.objects.filter(pk=task.pk).update(created_at=old.created_at, updated_at=old.updated_at)
        for item in old.items.order_by("index"):
            pair = _pair(BlindPair, task, item.index, item.reference_response, item.policy_response,
                         prompt=item.prompt, prompt_text=item.prompt, score_a=item.reference_score,
                         score_b=item.policy_score, auto_outcome=item.auto_outcome, ground_truth=item.ground_truth,
                         data_source=item.data_source)
            pair.save()
            policy_left = item.policy_side == "a"
            for v in item.verdicts.all():
                verdict = BlindVerdict.objects.create(pair=pair, reviewer_id=v.reviewer_id,
                                                      choice=BY_OUTCOME.get(float(v.outcome), "tie"),
                                                      shown_left="b" if policy_left else "a")
                BlindVerdict.objects.filter(pk=verdict.pk).update(created_at=v.created_at, updated_at=v.created_at)
        JudgeRun.objects.filter(task_id=old.pk).update(blind_task_id=task.pk)


def _copy_arenas(apps, first_id):
    Arena = apps.get_model("monitoring", "Arena")
    BlindTask = apps.get_model("monitoring", "BlindTask")
    BlindPair = apps.get_model("monitoring", "BlindPair")
    BlindVerdict = apps.get_model("monitoring", "BlindVerdict")
    JudgeRun = apps.get_model("monitoring", "JudgeRun")
    for n, old in enumerate(Arena.objects.order_by("pk")):
        version = old.dataset_version_id
        task = BlindTask.objects.create(
            pk=first_id + n, project_id=old.project_id, source="arena", title=old.title, sides=old.sides,
            a_checkpoint_id=old.a_checkpoint_id, a_model_id=old.a_model_id, b_checkpoint_id=old.b_checkpoint_id,
            b_model_id=old.b_model_id, dataset_version_id=version,
            origin=f"dataset version #{version}" if version else f"{len(old.prompts)} typed prompts",
            prompts=[{"prompt": p, "ground_truth": None, "data_source": "", "extra_info": {}} for p in old.prompts],
            sampling=old.sampling, seed=old.seed, engine=old.engine, progress=old.progress, status=old.status,
            error=old.error, started_at=old.started_at, finished_at=old.finished_at, is_open=old.is_open,
            closed_at=None if old.is_open else old.updated_at, anyone_may_judge=True,
            created_by_id=old.created_by_id)
        BlindTask.objects.filter(pk=task.pk).update(created_at=old.created_at, updated_at=old.updated_at)
        for p in old.pairs.order_by("index"):
            pair = _pair(BlindPair, task, p.index, p.response_a, p.response_b, prompt=p.prompt,
                         prompt_text=p.prompt_text, truncated_a=p.truncated_a, truncated_b=p.truncated_b, seed=p.seed)
            pair.save()
            for j in p.judgements.all():
                verdict = BlindVerdict.objects.create(pair=pair, reviewer_id=j.reviewer_id, choice=j.choice,
                                                      shown_left=j.shown_left)
                BlindVerdict.objects.filter(pk=verdict.pk).update(created_at=j.created_at, updated_at=j.updated_at)
        JudgeRun.objects.filter(arena_id=old.pk).update(blind_task_id=task.pk)


def forward(apps, schema_editor):
    HumanEvalTask = apps.get_model("monitoring", "HumanEvalTask")
    BlindTask = apps.get_model("monitoring", "BlindTask")
    _copy_human_evals(apps)
    last = HumanEvalTask.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
    _copy_arenas(apps, last + 1)
    connection = schema_editor.connection
    with connection.cursor() as cursor:  # ids were given explicitly: the next one follows them
        for sql in connection.ops.sequence_reset_sql(no_style(), [BlindTask]):
            cursor.execute(sql)


class Migration(migrations.Migration):

    dependencies = [
        ('monitoring', '0010_blind_tasks'),
    ]

    operations = [
        migrations.RunPython(forward, migrations.RunPython.noop),
    ]
