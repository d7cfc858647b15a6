from __future__ import annotations

import hashlib

import pytest

from webapp.core.models import AuditLog
from webapp.core.services import ApplicationError
from webapp.registry.models import ModelEntry, ModelKind
from webapp.rewards.models import RewardVersion
from webapp.rewards.services import (
    SourceError,
    reward_function_create,
    reward_spec_validate,
    reward_version_save,
)

pytestmark = pytest.mark.django_db


def test_create_makes_version_1_with_author_message_and_hash(project, engineer, exact_source):
    EXACT = exact_source
    fn = reward_function_create(project=project, user=engineer, name="exact", source=EXACT, message="first")
    v = fn.latest_version
    assert (v.number, v.author, v.message, v.entry_point) == (1, engineer, "first", "compute_score")
    assert v.sha256 == hashlib.sha256(EXACT.encode()).hexdigest()
    assert AuditLog.objects.filter(action="reward.create", project=project).count() == 1


def test_save_creates_the_next_immutable_version(reward_fn, admin_user, exact_source):
    EXACT = exact_source
    changed = EXACT.replace("1.0 if", "2.0 if")
    outcome = reward_version_save(function=reward_fn, user=admin_user, source=changed, message="double")
    assert outcome.created and outcome.version.number == 2 and outcome.version.author == admin_user
    assert outcome.message == "Saved version 2."
    assert RewardVersion.objects.get(function=reward_fn, number=1).source == EXACT  # untouched
    assert AuditLog.objects.filter(action="reward.version").count() == 1


def test_saving_identical_source_creates_nothing_and_says_so(reward_fn, engineer, exact_source):
    EXACT = exact_source
    outcome = reward_version_save(function=reward_fn, user=engineer, source=EXACT.replace("\n", "\r\n"))
    assert not outcome.created and outcome.version.number == 1
    assert "identical to version 1" in outcome.message
    assert reward_fn.versions.count() == 1


def test_syntax_error_is_refused_with_its_line(reward_fn, engineer):
    bad = "def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kw):\n    return (1\n"
    with pytest.raises(SourceError) as info:
        reward_version_save(function=reward_fn, user=engineer, source=bad)
    assert info.value.lineno == 2 and "Line 2" in info.value.message and info.value.field == "source"
    assert reward_fn.versions.count() == 1


@pytest.mark.parametrize("source, fragment", [
    ("def compute_score(solution_str):\n    return 1.0\n", "data_source"),
    ("def score(data_source, solution_str, ground_truth, extra_info=None):\n    return 1\n", "no top-level function"),
    ("def compute_score(data_source, solution_str, ground_truth, extra_info=None, **k):\n    x = 1\n", "never returns"),
])
def test_signature_problems_are_refused(reward_fn, engineer, source, fragment):
    with pytest.raises(SourceError, match=fragment):
        reward_version_save(function=reward_fn, user=engineer, source=source)


def test_warnings_do_not_block_saving(reward_fn, engineer):
    no_kwargs = "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 0.5\n"
    outcome = reward_version_save(function=reward_fn, user=engineer, source=no_kwargs)
    assert outcome.created and any("kwargs" in w["message"] for w in outcome.warnings)


def test_verl_import_reward_saves(project, engineer):
    src = "from verl.utils.reward_score import default_compute_score as compute_score\n"
    fn = reward_function_create(project=project, user=engineer, name="verl-default", source=src)
    assert fn.latest_version.source == src


@pytest.mark.parametrize("name", ["", "../etc", "a/b", "x" * 101])
def test_bad_names_are_refused(project, engineer, name, exact_source):
    EXACT = exact_source
    with pytest.raises(ApplicationError) as info:
        reward_function_create(project=project, user=engineer, name=name, source=EXACT)
    assert info.value.field == "name"


def test_duplicate_names_are_refused(reward_fn, project, engineer, exact_source):
    EXACT = exact_source
    with pytest.raises(ApplicationError, match="already exists"):
        reward_function_create(project=project, user=engineer, name="EXACT", source=EXACT)


def test_bad_entry_point_is_refused(reward_fn, engineer, exact_source):
    EXACT = exact_source
    with pytest.raises(ApplicationError) as info:
        reward_version_save(function=reward_fn, user=engineer, source=EXACT, entry_point="class")
    assert info.value.field == "entry_point"


def _rm(project):
    return ModelEntry.objects.create(project=project, name="rm", kind=ModelKind.REWARD_MODEL, path="/models/rm")


def test_reward_spec_validates(reward_fn, project):
    rm = _rm(project)
    v = reward_fn.latest_version
    spec = {"shaping": "normalized", "components": [{"type": "function", "version_id": v.pk, "weight": 1},
                                                    {"type": "model", "model_id": rm.pk, "weight": 0.5}]}
    assert reward_spec_validate(project=project, spec=spec) == {
        "shaping": "normalized", "components": [{"type": "function", "version_id": v.pk, "weight": 1.0},
                                                {"type": "model", "model_id": rm.pk, "weight": 0.5}]}


@pytest.mark.parametrize("spec, message", [
    ({"shaping": "raw", "components": []}, "at least one"),
    ({"shaping": "log", "components": [{"type": "function", "version_id": 1}]}, "Unknown shaping"),
    ({"components": [{"type": "function", "version_id": "V", "weight": 1}]}, "no reward function version"),
    ({"components": [{"type": "function", "version_id": 999999, "weight": 1}]}, "no reward function version"),
    ({"components": [{"type": "model", "model_id": 999999, "weight": 1}]}, "no reward model"),
    ({"components": [{"type": "shell", "weight": 1}]}, "type must be"),
    ("nope", "must be an object"),
])
def test_bad_reward_specs_are_refused(project, spec, message):
    with pytest.raises(ApplicationError, match=message):
        reward_spec_validate(project=project, spec=spec)


@pytest.mark.parametrize("weight", [0, -1, float("nan"), "1", True])
def test_weights_must_be_positive_numbers(reward_fn, project, weight):
    spec = {"components": [{"type": "function", "version_id": reward_fn.latest_version.pk, "weight": weight}]}
    with pytest.raises(ApplicationError, match="weight"):
        reward_spec_validate(project=project, spec=spec)


def test_spec_refuses_another_projects_objects_and_causal_lms(reward_fn, project, django_user_model):
    from webapp.core.models import Project

    other = Project.objects.create(slug="other", name="Other")
    spec = {"components": [{"type": "function", "version_id": reward_fn.latest_version.pk, "weight": 1}]}
    with pytest.raises(ApplicationError):
        reward_spec_validate(project=other, spec=spec)
    lm = ModelEntry.objects.create(project=project, name="policy", kind=ModelKind.CAUSAL_LM, path="/m")
    with pytest.raises(ApplicationError, match="no reward model"):
        reward_spec_validate(project=project, spec={"components": [{"type": "model", "model_id": lm.pk}]})
