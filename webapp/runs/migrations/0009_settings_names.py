"""One name per quantity, as in the job's settings: a zero-signal dry run's samples per prompt is its group size
and its generation length its max response length (stored params and results), and so is the generation length
of a job's periodic human-evaluation schedule (config["human_eval"])."""
from django.db import migrations

RENAMES = {"n": "group_size", "max_new_tokens": "max_response_length"}  # a dry run's params and result
SCHEDULE = {"max_new_tokens": "max_response_length"}  # config["human_eval"]


def _renamed(block, renames):
    if not isinstance(block, dict):
        return block
    return {renames.get(k, k): v for k, v in block.items()}


def forward(apps, schema_editor, renames=RENAMES, schedule=SCHEDULE):
    ZeroSignalRun, Job = apps.get_model("runs", "ZeroSignalRun"), apps.get_model("runs", "Job")
    for run in ZeroSignalRun.objects.all().only("pk", "params", "result").iterator():
        params, result = _renamed(run.params, renames), _renamed(run.result, renames)
        if isinstance(result, dict) and isinstance(result.get("params"), dict):
            result["params"] = _renamed(result["params"], renames)
        if params != run.params or result != run.result:
            ZeroSignalRun.objects.filter(pk=run.pk).update(params=params, result=result)
    for job in Job.objects.filter(config__has_key="human_eval").only("pk", "config").iterator():
        block = job.config.get("human_eval")
        if isinstance(block, dict) and set(block) & set(schedule):
            Job.objects.filter(pk=job.pk).update(config={**job.config, "human_eval": _renamed(block, schedule)})


def backward(apps, schema_editor):
    forward(apps, schema_editor, renames={v: k for k, v in RENAMES.items()},
            schedule={v: k for k, v in SCHEDULE.items()})


class Migration(migrations.Migration):
    dependencies = [("runs", "0008_rescoresample_log")]
    operations = [migrations.RunPython(forward, backward)]
