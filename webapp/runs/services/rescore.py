"""Re-scoring: a run's stored rollout samples (training.rollouts) scored again with another reward version,
without generating anything, as a worker job with progress; old vs new score per sample is kept.

`rescore_create` checks and queues (a request, the API, `manage.py rescore_run`); the worker runs
`rescore_execute` (jobs.tasks.rescore_run), which scores one step's samples at a time in the reward sandbox
(webapp.rewards.scoring.score_samples: the same isolation and limits as test-runs).

When the new version belongs to the same reward function as one of the job's components, it takes that
component's place in the job's mix (the job's weights and shaping, the other components' stored scores), so
"new" is the reward the run would have optimised. Otherwise it is scored alone (its own score, raw).
"""
from __future__ import annotations

import math
from typing import Any

from django.db import transaction
from django.utils import timezone

from training import ingest, rollouts
from training.reward_mix import component_names, mix
from training.rundir import RunDir, read_json
from webapp.core import text
from webapp.core.audit import audit
from webapp.core.queue import RESCORE_RUN, USER_CODE_QUEUE, enqueue
from webapp.core.services import ApplicationError
from webapp.rewards.models import RewardVersion
from webapp.rewards.samples import Sample
from webapp.rewards.scoring import score_samples
from webapp.runs.models import Job, Rescore, RescoreSample, RescoreState

MAX_SAMPLES = 50_000
KEEP_CHARS = 4000
TOLERANCE = 1e-9  # a new score this close to the old one is "unchanged"


def job_reward(job: Job) -> dict[str, Any]:
    """The reward the run used, from its job.json: shaping, and per component its name (as in the rollout
    rows and metrics), weight and reward version id (function components)."""
    spec = read_json(RunDir(job.run_dir).job_spec) if job.run_dir else None
    reward = (spec or {}).get("reward") or {}
    comps = [c for c in reward.get("components") or [] if isinstance(c, dict)]
    names = component_names(comps)
    return {"shaping": reward.get("shaping", "raw"),
            "components": [{"name": n, "weight": float(c.get("weight", 1.0)), "type": c.get("type"),
                            "version_id": c.get("version_id")} for n, c in zip(names, comps, strict=True)]}


def default_component(job: Job, version) -> str:
    """The job's component from the same reward function as `version` ("" when there is none)."""
    ids = {c["version_id"]: c["name"] for c in job_reward(job)["components"] if c["version_id"]}
    same = RewardVersion.objects.filter(pk__in=ids, function_id=version.function_id).values_list("pk", flat=True)
    return next((ids[pk] for pk in ids if pk in set(same)), "")


def parse_steps(text: str | list | None) -> list[int] | None:
    """"", "all" or None -> None (every stored step); "3, 5-8" or [3, 5] -> [3, 5, 6, 7, 8]."""
    if text is None or (isinstance(text, str) and text.strip().lower() in ("", "all")):
        return None
    parts = text if isinstance(text, list) else [p for p in str(text).replace(" ", "").split(",") if p]
    out: set[int] = set()
    try:
        for part in parts:
            if isinstance(part, str) and "-" in part.strip("-"):
                lo, hi = (int(x) for x in part.split("-", 1))
                if hi < lo or hi - lo > 100_000:
                    raise ValueError
                out.update(range(lo, hi + 1))
            elif isinstance(part, bool):
                raise ValueError
            else:
                out.add(int(part))
    except (TypeError, ValueError):
        raise ApplicationError("Steps are step numbers and ranges, e.g. 3, 5-8 (or blank for all).",
                               field="steps") from None
    return sorted(out)


def rescore_create(*, job: Job, user, version, steps: list[int] | None = None, component: str | None = None,
                   queue: bool = True) -> Rescore:
    """Check and queue a re-score; `steps` None = every stored step, `component` None = the job's component
    from the same reward function (or alone when there is none), "" = alone. `queue=False` leaves it queued
    for the caller to run (`manage.py rescore_run --here`)."""
    if version is None or version.function.project_id != job.project_id:
        raise ApplicationError("Choose a reward version of this project.", field="version")
    stored = rollouts.steps(job.run_dir) if job.run_dir else []
    if not stored:
        raise ApplicationError("This run has no stored rollout samples to re-score.", field="steps")
    wanted = sorted(set(steps)) if steps else stored
    missing = [s for s in wanted if s not in stored]
    if missing:
        raise ApplicationError(f"No stored samples for step{'s' if len(missing) > 1 else ''} "
                               f"{', '.join(map(str, missing[:10]))}; stored: {_ranges(stored)}.", field="steps")
    names = [c["name"] for c in job_reward(job)["components"]]
    if component is None:
        component = default_component(job, version)
    elif component and component not in names:
        raise ApplicationError(f"The job has no reward component {component!r} (it has {', '.join(names) or 'none'}).",
                               field="component")
    count = sum(len(ingest.read_samples(job.run_dir, rollouts.KIND, s)) for s in wanted)
    if count > MAX_SAMPLES:
        raise ApplicationError(f"{count:,} samples is more than {MAX_SAMPLES:,}: choose fewer steps.", field="steps")
    with transaction.atomic():
        rescore = Rescore.objects.create(job=job, reward_version=version, component=component, steps=wanted,
                                         sample_count=count, created_by=user)
        audit(actor=user, action="run.rescore", project=job.project, obj=rescore,
              summary=f"Re-score of {job.name} ({text.count(count, 'sample')}, {text.count(len(wanted), 'step')}) "
                      f"with {version}"
                      + (f" in place of {component}" if component else ""))
        if queue:
            transaction.on_commit(lambda: enqueue(RESCORE_RUN, rescore.pk, queue=USER_CODE_QUEUE))
    return rescore


def _ranges(steps: list[int]) -> str:
    return f"{steps[0]}–{steps[-1]} ({len(steps)} steps)" if len(steps) > 1 else str(steps[0])


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value) else None


def new_total(row: dict, score: float | None, error: str | None, reward: dict, component: str) -> tuple:
    """(new score, error) of one stored row: the mix with `component` replaced, or the new score alone."""
    if not component:
        return (None, error) if error else (score, None)
    stored = row.get("components") or {}
    names = [c["name"] for c in reward["components"]]
    absent = [n for n in names if n != component and n not in stored]
    if absent:
        return None, f"the stored sample has no score of {', '.join(absent)} to mix with"
    scores = [(None if error else score) if n == component else _number(stored.get(n)) for n in names]
    mixed = mix(scores, [c["weight"] for c in reward["components"]], reward["shaping"])
    return mixed.score, error


def _samples(rows: list[dict]) -> list:
    return [Sample(item={"data_source": str(r.get("data_source") or "default"),
                         "solution_str": str(r.get("output", "")), "ground_truth": r.get("gts"),
                         "extra_info": r.get("extra_info") or {}},
                   role="response", row_index=i, prompt=str(r.get("input", ""))) for i, r in enumerate(rows)]


def _score_step(rescore: Rescore, reward: dict, step: int, done: int) -> tuple[list[RescoreSample], str]:
    """Score one stored step; returns its result rows, or an error that stops the re-score."""
    rows = ingest.read_samples(rescore.job.run_dir, rollouts.KIND, step)
    if not rows:
        return [], ""

    def progress(n: int) -> None:
        Rescore.objects.filter(pk=rescore.pk).update(done_count=done + n)

    version = rescore.reward_version
    scored = score_samples(source=version.source, entry_point=version.entry_point, mode="responses",
                           samples=_samples(rows), on_progress=progress)
    if not scored.ok:
        return [], scored.error
    out = []
    for i, (row, res) in enumerate(zip(rows, scored.results, strict=True)):
        new, error = new_total(row, res["score"], res["error"], reward, rescore.component)
        old = _number(row.get("score"))
        delta = new - old if new is not None and old is not None else None
        changed = (delta is None and (new is None) != (old is None)) or (delta is not None and abs(delta) > TOLERANCE)
        out.append(RescoreSample(rescore=rescore, step=step, row=i, uid=str(row.get("uid") or "")[:100],
                                 prompt=str(row.get("input", ""))[:KEEP_CHARS],
                                 response=str(row.get("output", ""))[:KEEP_CHARS], old_score=old, new_score=new,
                                 delta=delta, changed=changed, error=(error or "")[:KEEP_CHARS],
                                 log=res.get("log") or ""))
    return out, ""


def _summary(rescore: Rescore, missing: list[int]) -> dict:
    qs = RescoreSample.objects.filter(rescore=rescore)
    pairs = list(qs.values_list("step", "old_score", "new_score", "changed", "error"))
    per_step: dict[int, dict] = {}
    for step, old, new, changed, error in pairs:
        s = per_step.setdefault(step, {"n": 0, "changed": 0, "old": [], "new": [], "errors": 0})
        s["n"] += 1
        s["changed"] += int(changed)
        s["errors"] += int(bool(error))
        if old is not None:
            s["old"].append(old)
        if new is not None:
            s["new"].append(new)

    def mean(values):
        return sum(values) / len(values) if values else None

    olds = [o for _, o, _, _, _ in pairs if o is not None]
    news = [n for _, _, n, _, _ in pairs if n is not None]
    return {"old_mean": mean(olds), "new_mean": mean(news), "errors": sum(1 for p in pairs if p[4]),
            "missing_steps": missing,
            "per_step": [{"step": k, "n": v["n"], "changed": v["changed"], "errors": v["errors"],
                          "old_mean": mean(v["old"]), "new_mean": mean(v["new"])} for k, v in sorted(per_step.items())]}


def rescore_execute(*, rescore_id: int) -> Rescore | None:
    """Run a queued re-score (on a worker); a redelivered or finished one is left alone."""
    claimed = Rescore.objects.filter(pk=rescore_id, state=RescoreState.QUEUED).update(
        state=RescoreState.RUNNING, started_at=timezone.now())
    rescore = Rescore.objects.select_related("job__project", "reward_version__function", "created_by").filter(
        pk=rescore_id).first()
    if not claimed or rescore is None:
        return rescore
    reward = job_reward(rescore.job)
    done, changed, missing, error = 0, 0, [], ""
    RescoreSample.objects.filter(rescore=rescore).delete()  # a worker that died half-way left some
    for step in rescore.steps:
        results, error = _score_step(rescore, reward, step, done)
        if error:
            break
        if not results:
            missing.append(step)  # pruned by retention since it was asked for
            continue
        RescoreSample.objects.bulk_create(results, batch_size=500)
        done += len(results)
        changed += sum(r.changed for r in results)
        Rescore.objects.filter(pk=rescore.pk).update(done_count=done, changed_count=changed)
    with transaction.atomic():
        rescore.done_count, rescore.changed_count = done, changed
        rescore.state = RescoreState.FAILED if error else RescoreState.SUCCEEDED
        rescore.error = error
        rescore.summary = _summary(rescore, missing)
        rescore.finished_at = timezone.now()
        rescore.save()
        share = f"{changed / done:.0%}" if done else "n/a"
        audit(actor=rescore.created_by, action="run.rescore_done", project=rescore.job.project, obj=rescore,
              summary=f"Re-score {rescore.pk} of {rescore.job.name}: {rescore.state}, "
                      f"{text.count(done, 'sample')}, {share} changed")
    return rescore
