"""Shared helpers of the browser tests: demo files, a seeded project, and a keyboard focus walker."""
from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PASSWORD = "pw-for-tests-1"

REWARD_SOURCE = (
    "def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n"
    "    # 1 for the exact answer, else 0\n"
    "    return 1.0 if str(solution_str).strip() == str(ground_truth).strip() else 0.0\n"
)


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def demo_files(folder: Path) -> tuple[Path, Path]:
    """A preference file (prompt/chosen/rejected) and a prompt file (prompt/ground_truth), the demo's sums."""
    from training.demo import arithmetic_rows, preference_rows

    prefs = write_jsonl(folder / "sum-preferences.jsonl", preference_rows(8, seed=0))
    prompts = [{k: v for k, v in r.items() if k != "extra_info"} for r in arithmetic_rows("train")]
    return prefs, write_jsonl(folder / "sum-prompts.jsonl", prompts)


@dataclass
class Seeded:
    prefs: Any  # DatasetVersion
    prompts: Any  # DatasetVersion
    reward: Any  # RewardFunction
    model: Any  # ModelEntry
    job: Any  # a finished GRPO Job with points and a checkpoint on disk


def seed_project(project, user, folder: Path) -> Seeded:
    """What a team has after a first run, built through the services (ORM only for the finished run)."""
    from django.conf import settings

    from training.demo import DEMO_VOCAB
    from training.models import build_tiny_model
    from webapp.datasets.services import dataset_import
    from webapp.registry.models import ModelEntry, ModelKind
    from webapp.rewards.services import reward_function_create
    from webapp.runs.models import Checkpoint, Job, JobState, MetricPoint

    prefs_file, prompts_file = demo_files(folder)
    prefs = dataset_import(project=project, user=user, name="sum-preferences", path=prefs_file)
    prompts = dataset_import(project=project, user=user, name="sum-prompts", path=prompts_file, split="8")
    reward = reward_function_create(project=project, user=user, name="exact-match", source=REWARD_SOURCE)
    model_dir = build_tiny_model(Path(settings.MODELS_ROOT) / "tiny", vocab=DEMO_VOCAB, hidden=32, layers=1,
                                 max_positions=32)
    model = ModelEntry.objects.create(project=project, name="tiny", kind=ModelKind.CAUSAL_LM, path=str(model_dir))
    config = {"hp": {"lr": 1e-3, "kl_coef": 0.02, "save_freq": 10, "test_freq": 10, "keep_last_k": 3,
                     "max_steps": 20}, "guard_rules": [{"rule": "kl", "enabled": False, "threshold": 2.0}],
              "total_steps": 20}
    job = Job.objects.create(project=project, name="grpo · tiny · demo-cpu", kind="grpo", state=JobState.SUCCEEDED,
                             preset="demo-cpu", config=config, base_model=model, dataset_version=prompts,
                             created_by=user, last_step=20)
    run_dir = Path(settings.RUNS_ROOT) / project.slug / f"{job.pk}-seeded"  # the layout claim_run_dir makes
    ckpt_dir = run_dir / "checkpoints" / "global_step_10"
    (ckpt_dir / "model").mkdir(parents=True)
    (ckpt_dir / "model" / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    (ckpt_dir / "manifest.json").write_text(json.dumps({"step": 10, "format": "local", "lora": False}))
    job.run_dir = str(run_dir)
    job.save(update_fields=["run_dir"])
    Checkpoint.objects.create(job=job, step=10, path=str(ckpt_dir), size_bytes=4096,
                              metrics={"critic/score/mean": 0.3})
    t0 = time.time() - 600
    MetricPoint.objects.bulk_create(
        MetricPoint(job=job, step=s, name=name, value=value, wall_time=t0 + 5 * s)
        for s in range(1, 21)
        for name, value in (("critic/score/mean", 0.1 + 0.02 * s), ("actor/kl_loss", 0.005 * s)))
    return Seeded(prefs=prefs, prompts=prompts, reward=reward, model=model, job=job)


# -- keyboard focus ------------------------------------------------------------------------------

_FOCUS_JS = """() => {
  const el = document.activeElement;
  if (!el || el === document.body || el === document.documentElement) return null;
  const cm = el.closest('.CodeMirror');
  const cs = getComputedStyle(el);
  const box = (cm || el).getBoundingClientRect();
  const label = el.labels && el.labels.length ? el.labels[0].innerText : '';
  return {tag: el.tagName.toLowerCase(), id: el.id || '', name: el.getAttribute('name') || '',
          type: el.getAttribute('type') || '', href: el.getAttribute('href') || '',
          text: ((el.tagName === 'INPUT' || el.tagName === 'SELECT' || el.tagName === 'TEXTAREA') ? label
                 : (el.innerText || el.getAttribute('aria-label') || '')).trim().replace(/\\s+/g, ' ').slice(0, 80),
          outline: cs.outlineStyle, outlineWidth: parseFloat(cs.outlineWidth) || 0,
          codemirror: !!cm, cmFocused: !!(cm && cm.classList.contains('CodeMirror-focused')),
          visible: box.width > 0 && box.height > 0};
}"""


def open_new_job_form(page, live_server, project, engineer, folder: Path) -> Seeded:
    """Seed the project, sign the engineer in and fill the New job form's dataset (sum-prompts), model (tiny) and
    exact-match weight, as most job-form tests start."""
    from tests.browser_support import login

    engineer.set_password(PASSWORD)
    engineer.save()
    seeded = seed_project(project, engineer, folder)
    login(page, live_server, engineer.username, PASSWORD)
    page.goto(f"{live_server.url}/p/{project.slug}/jobs/new/")
    for label, text in (("Dataset version", "sum-prompts"), ("Base model", "tiny")):
        select = page.get_by_label(label, exact=True)  # exact: "From a dataset version" also matches
        select.select_option(value=select.locator("option", has_text=text).first.get_attribute("value"))
    page.get_by_label("exact-match weight").fill("1")
    return seeded


def focused(page) -> dict | None:
    return page.evaluate(_FOCUS_JS)


def has_visible_focus(info: dict) -> bool:
    """A keyboard user can see where the focus is: an outline, or CodeMirror's own focused editor."""
    if info["codemirror"]:
        return info["cmFocused"]
    return info["visible"] and info["outline"] != "none" and info["outlineWidth"] >= 1


def tab_to(page, wanted: Callable[[dict], bool], what: str, max_tabs: int = 120) -> list[dict]:
    """Press Tab until `wanted(focused element)`; every element passed on the way must show its focus.

    Inside the code editor Tab indents, so the walker leaves it the documented way (Esc).
    Returns the elements visited (the wanted one last).
    """
    visited: list[dict] = []
    for _ in range(max_tabs):
        page.keyboard.press("Tab")
        info = focused(page)
        if info is None:
            continue
        if info["codemirror"]:
            assert has_visible_focus(info), f"the code editor shows no focus on {page.url}"
            visited.append(info)
            page.keyboard.press("Escape")  # leaves the editor and focuses the next control
            info = focused(page)
            if info is None:
                continue
        visited.append(info)
        assert has_visible_focus(info), f"no visible focus on {info} at {page.url}"
        if wanted(info):
            if os.environ.get("WB_TAB_TRACE"):
                print(page.url, [f"{v['tag']}:{v['text'][:20] or v['name']}" for v in visited])
            return visited
    trail = ", ".join(f"{v['tag']}:{v['text'] or v['name'] or v['id']}" for v in visited[-15:])
    raise AssertionError(f"{what} not reached with Tab on {page.url} after {max_tabs} presses; last: {trail}")


def named(text: str) -> Callable[[dict], bool]:
    return lambda info: text.lower() in info["text"].lower()
