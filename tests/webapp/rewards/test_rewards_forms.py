"""The reward-spec widget used by the job launch form."""
from __future__ import annotations

import pytest
from django.template.loader import render_to_string

from webapp.registry.models import ModelEntry, ModelKind
from webapp.rewards.forms import RewardSpecForm, build_reward_spec
from webapp.rewards.services import reward_version_save

pytestmark = pytest.mark.django_db


@pytest.fixture
def rm(project):
    return ModelEntry.objects.create(project=project, name="rm", kind=ModelKind.REWARD_MODEL, path="/m/rm")


def test_weighted_function_and_model(project, reward_fn, rm, engineer, exact_source):
    v2 = reward_version_save(function=reward_fn, user=engineer, source=exact_source + "# v2\n").version
    v1 = reward_fn.versions.get(number=1)
    form = RewardSpecForm({"reward-shaping": "binary", f"reward-fn_{reward_fn.pk}_version": v1.pk,
                           f"reward-fn_{reward_fn.pk}_weight": "2", f"reward-rm_{rm.pk}_weight": "0.5"},
                          project=project, prefix="reward")
    assert form.is_valid(), form.errors
    assert form.cleaned_data["reward_spec"] == {"shaping": "binary", "components": [
        {"type": "function", "version_id": v1.pk, "weight": 2.0}, {"type": "model", "model_id": rm.pk, "weight": 0.5}]}
    assert form.fields[f"fn_{reward_fn.pk}_version"].initial == v2.pk  # the latest is preselected


def test_blank_weights_leave_components_out_and_the_form_only_parses(project, reward_fn, rm):
    form = RewardSpecForm({"shaping": "raw", f"fn_{reward_fn.pk}_version": reward_fn.latest_version.pk},
                          project=project)
    # Nothing chosen parses to an empty spec: whether the job needs a reward is the launch plan's call.
    assert form.is_valid(), form.errors
    assert form.cleaned_data["reward_spec"] == {"shaping": "raw", "components": []}


def test_negative_weight_is_shown_next_to_its_field(project, reward_fn, rm):
    form = RewardSpecForm({"shaping": "raw", f"fn_{reward_fn.pk}_version": reward_fn.latest_version.pk,
                           f"rm_{rm.pk}_weight": "-1"}, project=project)
    assert not form.is_valid() and "above 0" in form.errors[f"rm_{rm.pk}_weight"][0]


def test_a_version_of_another_function_cannot_be_posted(project, reward_fn, engineer, exact_source):
    from webapp.rewards.services import reward_function_create

    other = reward_function_create(project=project, user=engineer, name="other", source=exact_source)
    form = RewardSpecForm({"shaping": "raw", f"fn_{reward_fn.pk}_version": other.latest_version.pk,
                           f"fn_{reward_fn.pk}_weight": "1"}, project=project)
    assert not form.is_valid() and f"fn_{reward_fn.pk}_version" in form.errors


def test_initial_spec_prefills_the_widget(project, reward_fn, rm):
    spec = {"shaping": "normalized", "components": [{"type": "model", "model_id": rm.pk, "weight": 3.0}]}
    form = RewardSpecForm(project=project, initial_spec=spec)
    assert form.initial["shaping"] == "normalized" and form.initial[f"rm_{rm.pk}_weight"] == 3.0


def test_build_reward_spec_is_plain_data():
    assert build_reward_spec({"shaping": "raw", "fn_3_version": 11, "fn_3_weight": 1.5, "fn_4_version": 12,
                              "fn_4_weight": None, "rm_9_weight": 0.0}) == {
        "shaping": "raw", "components": [{"type": "function", "version_id": 11, "weight": 1.5}]}


def test_widget_renders_rows_and_an_empty_state(project, reward_fn, rm):
    html = render_to_string("rewards/_reward_spec_fields.html", {"form": RewardSpecForm(project=project)})
    assert "exact" in html and "rm" in html and "Reward shaping" in html
    from webapp.core.models import Project

    empty = Project.objects.create(slug="empty", name="Empty")
    html = render_to_string("rewards/_reward_spec_fields.html", {"form": RewardSpecForm(project=empty)})
    assert "Write a reward function" in html
