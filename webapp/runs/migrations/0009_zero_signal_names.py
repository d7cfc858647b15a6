"""A zero-signal dry run's samples per prompt is its group size, and its generation length its max response
length, as in the job's settings: stored params and results get those names."""
from django.db import migrations

RENAMES = {"n": "group_size", "max_new_tokens": "max_response_length"}


def _renamed(block, renames):
    if not isinstance(block, dict):
        return block
    return {renames.get(k, k): v for k, v in block.items()}


def forward(apps, schema_editor, renames=RENAMES):
    ZeroSignalRun = apps.get_model("runs", "ZeroSignalRun")
    for run in ZeroSignalRun.objects.all().only("pk", "params", "result").iterator():
        params = _renamed(run.params, renames)
        result = _renamed(run.result, renames)
        if isinstance(result, dict) and isinstance(result.get("params"), dict):
            result["params"] = _renamed(result["params"], renames)
        if params != run.params or result != run.result:
            ZeroSignalRun.objects.filter(pk=run.pk).update(params=params, result=result)


def backward(apps, schema_editor):
    forward(apps, schema_editor, renames={v: k for k, v in RENAMES.items()})


class Migration(migrations.Migration):
    dependencies = [("runs", "0008_rescoresample_log")]
    operations = [migrations.RunPython(forward, backward)]
