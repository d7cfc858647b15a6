"""Models registered by path come from approved folders only, never from the app's data folders."""
from __future__ import annotations

import shutil

import pytest

from tests.webapp.runs.test_runs_api import api_url
from webapp.core.models import Project
from webapp.registry.models import ModelEntry

REFUSED = "is not in an approved model folder"


@pytest.fixture
def shared_root(settings, tmp_path, tiny_model_dir):
    """An operator-approved folder holding one model, next to MODELS_ROOT."""
    root = tmp_path / "shared-models"
    shutil.copytree(tiny_model_dir, root / "tiny")
    settings.MODEL_ROOTS = [str(root)]
    return root


def _post(api, project, path):
    return api.post(api_url(project, "models/"), {"name": "m", "path": str(path)}, format="json")


def test_models_under_approved_roots_register(project, engineer, api_for, settings, shared_root, tiny_model_dir):
    api = api_for(engineer)
    assert _post(api, project, shared_root / "tiny").status_code == 201
    shutil.copytree(tiny_model_dir, settings.MODELS_ROOT / "mine")
    resp = api.post(api_url(project, "models/"), {"name": "m2", "path": str(settings.MODELS_ROOT / "mine")},
                    format="json")
    assert resp.status_code == 201
    resp = api.post(api_url(project, "models/"), {"name": "hub", "hub_id": "Qwen/Qwen2.5-0.5B-Instruct"},
                    format="json")
    assert resp.status_code == 201


def test_another_projects_checkpoint_cannot_be_registered(project, engineer, api_for, settings, shared_root,
                                                          tiny_model_dir):
    """The attack: B's checkpoint folder, predictable from its run page, registered as a model of A."""
    other = Project.objects.create(slug="beta", name="Beta")
    ckpt = settings.RUNS_ROOT / other.slug / "job-7" / "checkpoints" / "global_step_2" / "model"
    shutil.copytree(tiny_model_dir, ckpt)
    promoted = settings.MODELS_ROOT / other.slug / "job7-step2"  # B's promoted checkpoint
    shutil.copytree(tiny_model_dir, promoted)
    upload = settings.MEDIA_ROOT / "uploads" / "m"
    shutil.copytree(tiny_model_dir, upload)
    link = shared_root / "link"
    link.symlink_to(ckpt, target_is_directory=True)
    sneaky = shared_root / "sneaky"
    sneaky.mkdir()
    for f in ckpt.iterdir():  # an approved folder whose files point into a run directory
        (sneaky / f.name).symlink_to(f)
    api = api_for(engineer)
    for path in (ckpt, promoted, upload, link, sneaky, shared_root / ".." / "runs" / other.slug / "job-7"
                 / "checkpoints" / "global_step_2" / "model", settings.MODELS_ROOT / ".." / "runs"):
        resp = _post(api, project, path)
        assert resp.status_code == 400, path
        assert REFUSED in resp.json()["detail"], resp.json()
    assert not ModelEntry.objects.exists()


def test_refusals_do_not_tell_which_paths_exist(project, engineer, api_for, settings, shared_root, tmp_path):
    """Outside the approved folders, an existing folder and a missing one get the same answer."""
    api = api_for(engineer)
    (settings.RUNS_ROOT / "acme" / "job-1").mkdir(parents=True)
    answers = set()
    for path in (settings.RUNS_ROOT / "acme" / "job-1", settings.RUNS_ROOT / "acme" / "job-2", tmp_path,
                 tmp_path / "missing", "/etc", "/nonexistent-folder"):
        resp = _post(api, project, path)
        assert resp.status_code == 400
        detail = resp.json()["detail"]
        assert detail.startswith(str(path))
        answers.add(detail[len(str(path)):])
    assert len(answers) == 1, answers


def test_the_web_page_applies_the_same_rule(project, engineer, as_user, settings, shared_root, tiny_model_dir):
    ckpt = settings.RUNS_ROOT / "beta" / "job-7" / "checkpoints" / "global_step_2"
    shutil.copytree(tiny_model_dir, ckpt)
    resp = as_user(engineer).post(f"/p/{project.slug}/jobs/models/", {"name": "x", "path": str(ckpt)})
    assert resp.status_code == 400 and REFUSED in resp.context["form"].errors["path"][0]
    resp = as_user(engineer).post(f"/p/{project.slug}/jobs/models/", {"name": "x", "path": str(shared_root / "tiny")})
    assert resp.status_code == 302
