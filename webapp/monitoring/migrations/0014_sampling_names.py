"""A blind task's generation length is its max response length, as in the job's settings."""
from django.db import migrations


def _rename(apps, old, new):
    BlindTask = apps.get_model("monitoring", "BlindTask")
    for task in BlindTask.objects.all().only("pk", "sampling").iterator():
        if isinstance(task.sampling, dict) and old in task.sampling:
            sampling = {new if k == old else k: v for k, v in task.sampling.items()}
            BlindTask.objects.filter(pk=task.pk).update(sampling=sampling)


class Migration(migrations.Migration):
    dependencies = [("monitoring", "0013_one_guard")]
    operations = [migrations.RunPython(lambda apps, _: _rename(apps, "max_new_tokens", "max_response_length"),
                                       lambda apps, _: _rename(apps, "max_response_length", "max_new_tokens"))]
