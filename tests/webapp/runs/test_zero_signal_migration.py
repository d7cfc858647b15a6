"""The data migration that gave zero-signal dry runs and human-evaluation schedules the settings' names
(runs 0009_settings_names), run forward and back on rows stored the old way."""
from __future__ import annotations

import pytest

from tests.migration_support import migrate_app_to

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = ("runs", "0008_rescoresample_log")
AFTER = ("runs", "0009_settings_names")
OLD_PARAMS = {"n": 3, "max_new_tokens": 16, "max_prompts": 10, "temperature": 1.0, "seed": 0}
OLD_RESULT = {"prompts": 10, "n": 3, "tied": 2, "params": {"n": 3, "max_new_tokens": 16, "top_p": 1.0}}


def test_stored_dry_runs_get_the_settings_names_and_back():
    apps = migrate_app_to(BEFORE)
    try:
        Project, Dataset = apps.get_model("core", "Project"), apps.get_model("datasets", "Dataset")
        DatasetVersion, ZeroSignalRun = apps.get_model("datasets", "DatasetVersion"), apps.get_model("runs",
                                                                                                      "ZeroSignalRun")
        project = Project.objects.create(slug="old", name="Old")
        version = DatasetVersion.objects.create(dataset=Dataset.objects.create(project=project, name="p"), number=1)
        pk = ZeroSignalRun.objects.create(version=version, params=OLD_PARAMS, result=OLD_RESULT).pk
        old_config = {"hp": {"max_response_length": 512}, "human_eval": {"every": 2, "max_new_tokens": 32}}
        job = apps.get_model("runs", "Job").objects.create(project=project, name="j", kind="grpo", config=old_config)
        apps = migrate_app_to(AFTER)
        run = apps.get_model("runs", "ZeroSignalRun").objects.get(pk=pk)
        assert apps.get_model("runs", "Job").objects.get(pk=job.pk).config == {
            "hp": {"max_response_length": 512}, "human_eval": {"every": 2, "max_response_length": 32}}
        assert run.params == {"group_size": 3, "max_response_length": 16, "max_prompts": 10, "temperature": 1.0,
                              "seed": 0}
        assert run.result == {"prompts": 10, "group_size": 3, "tied": 2,
                              "params": {"group_size": 3, "max_response_length": 16, "top_p": 1.0}}
        apps = migrate_app_to(BEFORE)
        run = apps.get_model("runs", "ZeroSignalRun").objects.get(pk=pk)
        assert (run.params, run.result) == (OLD_PARAMS, OLD_RESULT)
        assert apps.get_model("runs", "Job").objects.get(pk=job.pk).config == old_config
    finally:
        migrate_app_to(None)  # every app at its latest again (AFTER is not the latest of runs)
