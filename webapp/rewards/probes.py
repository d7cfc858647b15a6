"""Probes: every reward version is scored on inputs it must score low (built-in) and on its author's probes.

A version's probes run on a worker when it is saved (`probe_run_request`, task RUN_REWARD_PROBES) and
again before a launch when they have not run for the current suite (`probe_gate`, called by the launch
planner: the launch waits for them, in the sandbox, or refuses while a worker is still on them). A
failing probe blocks launching the version until an engineer overrides it with a reason (audited).
The calls go through `webapp.rewards.scoring.score_samples`, the sandbox path of test-runs: user code
never runs in a web or worker process.
"""
from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.urls import reverse
from django.utils import timezone

from training.reward_probes import SCALES, SUITE_VERSION, LowRule, Probe, builtin_probes, judge
from webapp.core.audit import audit
from webapp.core.queue import RUN_REWARD_PROBES, USER_CODE_QUEUE, enqueue
from webapp.core.services import ApplicationError
from webapp.rewards import samples as sample_lib
from webapp.rewards.models import ProbeRunState, RewardFunction, RewardProbe, RewardProbeRun, RewardVersion
from webapp.rewards.sandbox_status import REFUSED, sandbox_refusal

PROBE_TIME_LIMIT_S = 2.0  # per call: a probe that takes longer fails as timed out
PROBE_BATCH_LIMIT_S = 20.0
PROBE_LOAD_LIMIT_S = 30.0  # importing the reward (VERL's scorers import torch: ~5 s); a launch waits this at most
MAX_AUTHOR_PROBES = 50
PROBE_TEXT_MAX = 20_000
WORKER_WAIT_S = 20.0  # a launch waits this long for a worker that is running the probes right now
RUNNING_STALE_AFTER = timedelta(minutes=2)  # a run a worker took this long ago and never finished was lost
KEEP = 500  # characters of each input kept with a verdict


@dataclass
class ProbeStatus:
    """A version's probe state for the current suite: pending, passed, failed or overridden."""

    state: str
    run: RewardProbeRun | None

    @property
    def blocks_launch(self) -> bool:
        return self.state in ("pending", "failed")

    @property
    def words(self) -> str:
        if self.state == "pending":
            return "probes pending"
        if self.state == "overridden":
            return f"{self.run.failed_count} failing probe{'s' if self.run.failed_count != 1 else ''}, overridden"
        if self.state == "failed":
            return f"{self.run.failed_count} failing probe{'s' if self.run.failed_count != 1 else ''}"
        return "probes passed"


def low_rule(function: RewardFunction) -> LowRule:
    return LowRule(scale=function.probe_scale if function.probe_scale in SCALES else "unit",
                   threshold=float(function.probe_threshold or 0.0))


def author_probes(function: RewardFunction) -> list[RewardProbe]:
    return list(function.probes.order_by("id"))


def suite(function: RewardFunction, probes: list[RewardProbe] | None = None) -> list[Probe]:
    """The built-ins (for the example of the first author probe, else a GSM8K one) and the author's probes."""
    probes = author_probes(function) if probes is None else probes
    first = probes[0] if probes else None
    context = ({"prompt": first.prompt, "ground_truth": first.ground_truth, "data_source": first.data_source,
                "extra_info": first.extra_info} if first else None)
    out = builtin_probes(context)
    for p in probes:
        out.append(Probe(key=f"author:{p.pk}", name=p.name, kind="author", prompt=p.prompt, lo=p.lo, hi=p.hi,
                         item={"data_source": p.data_source, "solution_str": p.solution_str,
                               "ground_truth": p.ground_truth, "extra_info": dict(p.extra_info or {})}))
    return out


def suite_sha(probes: list[Probe], rule: LowRule) -> str:
    text = json.dumps([SUITE_VERSION, rule.scale, rule.threshold, [p.to_dict() for p in probes]],
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def function_suite_sha(function: RewardFunction) -> str:
    return suite_sha(suite(function), low_rule(function))


def current_run(version: RewardVersion, sha: str | None = None) -> RewardProbeRun | None:
    """The newest run of the current suite on `version` (None: never run with these probes)."""
    sha = sha or function_suite_sha(version.function)
    return version.probe_runs.filter(suite_sha=sha).select_related("overridden_by").order_by("-id").first()


def probe_status(version: RewardVersion, sha: str | None = None) -> ProbeStatus:
    run = current_run(version, sha)
    if run is None or run.is_pending or run.isolation == REFUSED:  # refused by the sandbox: it never ran
        return ProbeStatus("pending", run)
    if run.state == ProbeRunState.PASSED:
        return ProbeStatus("passed", run)
    return ProbeStatus("overridden" if run.overridden else "failed", run)


# ---- running ---------------------------------------------------------------------------------------

def probe_limits():
    from training.sandbox import SandboxLimits

    return SandboxLimits(time_limit_s=min(float(settings.REWARD_TIME_LIMIT_S), PROBE_TIME_LIMIT_S),
                         batch_time_limit_s=PROBE_BATCH_LIMIT_S, load_time_limit_s=PROBE_LOAD_LIMIT_S,
                         memory_mb=int(settings.REWARD_MEMORY_MB))


def evaluate(*, source: str, entry_point: str, probes: list[Probe], rule: LowRule) -> dict[str, Any]:
    """Score every probe in the sandbox and judge it: {"results", "failed_count", "error", "isolation",
    "duration_ms"}. A reward that cannot be loaded fails every probe with the load error."""
    from webapp.rewards.scoring import score_samples

    samples = [sample_lib.Sample(item=p.item, role=p.kind, prompt=p.prompt) for p in probes]
    scored = score_samples(source=source, entry_point=entry_point, mode="probes", samples=samples,
                           limits=probe_limits())
    by_index = {r["i"]: r for r in scored.results}
    results = []
    for i, probe in enumerate(probes):
        res = by_index.get(i)
        if res is None:
            score, error, lineno = None, scored.error or "not scored", scored.error_lineno
        else:
            score, error, lineno = res["score"], res["error"], res["lineno"]
        verdict = judge(probe, score, error, rule)
        item = probe.item
        results.append({
            "key": probe.key, "name": probe.name, "kind": probe.kind, "why": probe.why,
            "input": {"solution_str": sample_lib.clip(item["solution_str"], KEEP),
                      "solution_chars": len(item["solution_str"]),
                      "ground_truth": sample_lib.clip(item["ground_truth"], KEEP),
                      "data_source": item["data_source"], "extra_info": item["extra_info"]},
            "expected": verdict.expected, "score": score, "passed": verdict.passed, "reason": verdict.reason,
            "lineno": lineno, "duration_ms": res["duration_ms"] if res else None,
        })
    return {"results": results, "failed_count": sum(1 for r in results if not r["passed"]),
            "error": scored.error, "isolation": scored.isolation, "duration_ms": round(scored.duration_ms, 1)}


def probe_run_request(*, version: RewardVersion, trigger: str, user=None) -> RewardProbeRun:
    """Queue a probe run of `version` with the current suite for a worker (sent when the transaction commits)."""
    run = RewardProbeRun.objects.create(version=version, suite_sha=function_suite_sha(version.function),
                                        trigger=trigger, requested_by=user if getattr(user, "pk", None) else None)
    transaction.on_commit(lambda: _enqueue(run.pk))
    return run


def _enqueue(run_id: int) -> None:
    enqueue(RUN_REWARD_PROBES, run_id, queue=USER_CODE_QUEUE)


def probe_run_execute(*, run_id: int) -> RewardProbeRun | None:
    """Run a queued probe run (a worker's task, or a launch that waits); a taken or finished one is left alone."""
    claimed = RewardProbeRun.objects.filter(pk=run_id, state=ProbeRunState.QUEUED).update(
        state=ProbeRunState.RUNNING, started_at=timezone.now())
    run = RewardProbeRun.objects.select_related("version__function__project").filter(pk=run_id).first()
    if not claimed or run is None:
        return run
    function = run.version.function
    probes, rule = suite(function), low_rule(function)
    if suite_sha(probes, rule) != run.suite_sha:  # the probes changed meanwhile: a newer run checks the new suite
        run.state, run.error = ProbeRunState.FAILED, "The probes changed before this run started; it was replaced."
        run.finished_at = timezone.now()
        run.save(update_fields=["state", "error", "finished_at"])
        return run
    outcome = evaluate(source=run.version.source, entry_point=run.version.entry_point, probes=probes, rule=rule)
    run.results, run.failed_count = outcome["results"], outcome["failed_count"]
    run.error, run.isolation, run.duration_ms = outcome["error"], outcome["isolation"], outcome["duration_ms"]
    run.state = ProbeRunState.PASSED if run.failed_count == 0 else ProbeRunState.FAILED
    run.finished_at = timezone.now()
    run.save()
    return run


def _run_now(version: RewardVersion, sha: str, trigger: str, user=None) -> RewardProbeRun:
    """Run the probes of `version` here and now (in the sandbox), taking a queued run if there is one."""
    queued = version.probe_runs.filter(suite_sha=sha, state=ProbeRunState.QUEUED).order_by("-id").first()
    if queued is None:
        queued = RewardProbeRun.objects.create(version=version, suite_sha=sha, trigger=trigger,
                                               requested_by=user if getattr(user, "pk", None) else None)
    return probe_run_execute(run_id=queued.pk)


def probe_run_now(*, version: RewardVersion, user=None) -> RewardProbeRun:
    """Run the current suite on `version` now, in the sandbox (the page's and the CLI's "run probes now")."""
    return _run_now(version, function_suite_sha(version.function), "asked", user)


def ensure_probed(version: RewardVersion, *, trigger: str = "launch", user=None) -> ProbeStatus:
    """The version's status, running its probes first when they have not run for the current suite.

    When a worker is on them right now (a reward saved a moment ago), wait up to WORKER_WAIT_S for it;
    inside a transaction the worker's result could not be seen, so they stay pending there."""
    sha = function_suite_sha(version.function)
    status = probe_status(version, sha)
    run = status.run
    lost = run is not None and run.state == ProbeRunState.RUNNING and run.started_at is not None \
        and run.started_at < timezone.now() - RUNNING_STALE_AFTER
    refused = run is not None and run.isolation == REFUSED and not run.is_pending
    if status.state == "pending" and (run is None or run.state == ProbeRunState.QUEUED or lost or refused):
        _run_now(version, sha, trigger, user)
        status = probe_status(version, sha)
    deadline = time.monotonic() + WORKER_WAIT_S
    in_transaction = connection.in_atomic_block
    while status.state == "pending" and not in_transaction and time.monotonic() < deadline:
        time.sleep(0.25)
        status = probe_status(version, sha)
    return status


def reward_page(version: RewardVersion) -> str:
    return reverse("rewards:detail", kwargs={"slug": version.function.project.slug, "pk": version.function_id})


def probe_gate(versions: list[RewardVersion], *, user=None) -> tuple[list[str], list[str]]:
    """What the probes say about launching with `versions`: (errors that refuse it, warnings).

    Probes that have not run yet are run now (the launch waits for them)."""
    errors, warnings, seen = [], [], set()
    refusal = sandbox_refusal() if versions else ""
    if refusal:  # fail closed: no probe, and no training, runs reward code without isolation
        return [refusal], warnings
    for version in versions:
        if version.pk in seen:
            continue
        seen.add(version.pk)
        status = ensure_probed(version, user=user)
        label = f"{version.function.name} v{version.number}"
        if status.state == "pending" and status.run is not None and status.run.isolation == REFUSED:
            errors.append(f"{label}: {status.run.error}")
        elif status.state == "pending":
            errors.append(f"{label}: probes pending (a worker is running them now); launch again in a few seconds.")
        elif status.state == "failed":
            n = status.run.failed_count
            names = "; ".join(f"{r['name']}: {r['reason']}" for r in status.run.failures[:3])
            more = f"; and {n - 3} more" if n > 3 else ""
            errors.append(f"{label} fails {n} probe{'s' if n != 1 else ''} ({names}{more}). Fix the reward, or an "
                          f"engineer can override the probes with a reason on its page ({reward_page(version)}).")
        elif status.state == "overridden":
            warnings.append(f"{label} launches with {status.words} by "
                            f"{getattr(status.run.overridden_by, 'username', 'someone')}: {status.run.override_reason}")
    return errors, warnings


# ---- the author's probes, the low rule, overrides ------------------------------------------------------

def _number(value: Any, label: str) -> float | None:
    if value in (None, ""):
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise ApplicationError(f"{label} must be a number.", field=label.split()[0].lower()) from None
    if isinstance(value, bool) or not math.isfinite(out):
        raise ApplicationError(f"{label} must be a finite number.", field=label.split()[0].lower())
    return out


def _requeue_latest(function: RewardFunction, user, trigger: str) -> None:
    latest = function.latest_version
    if latest is not None:
        probe_run_request(version=latest, trigger=trigger, user=user)


@transaction.atomic
def probe_create(*, function: RewardFunction, user, name: str, solution_str: str, ground_truth: Any = "",
                 data_source: str = "", extra_info: dict | None = None, lo: Any = None, hi: Any = None,
                 prompt: str = "") -> RewardProbe:
    """Add an author's probe; every version is then checked with it (the latest version's run is queued)."""
    name = (name or "").strip()
    if not name or len(name) > 100:
        raise ApplicationError("Name the probe (1-100 characters).", field="name")
    if not isinstance(solution_str, str) or len(solution_str) > PROBE_TEXT_MAX:
        raise ApplicationError(f"The response must be text of at most {PROBE_TEXT_MAX:,} characters.",
                               field="solution_str")
    if len(json.dumps(ground_truth, default=str)) > PROBE_TEXT_MAX or len(prompt or "") > PROBE_TEXT_MAX:
        raise ApplicationError("The ground truth or prompt is too long.", field="ground_truth")
    if extra_info is not None and not isinstance(extra_info, dict):
        raise ApplicationError("extra_info must be a JSON object.", field="extra_info")
    if not isinstance(data_source, str) or len(data_source) > 200:
        raise ApplicationError("data_source must be text of at most 200 characters.", field="data_source")
    low, high = _number(lo, "lo (the lowest expected score)"), _number(hi, "hi (the highest expected score)")
    if low is None and high is None:
        raise ApplicationError("Give the expected range: lo, hi or both.", field="lo")
    if low is not None and high is not None and low > high:
        raise ApplicationError("lo must not be above hi.", field="lo")
    if function.probes.count() >= MAX_AUTHOR_PROBES:
        raise ApplicationError(f"At most {MAX_AUTHOR_PROBES} probes per reward function.", field="name")
    probe = RewardProbe.objects.create(function=function, name=name, prompt=prompt or "", solution_str=solution_str,
                                       ground_truth=ground_truth, data_source=data_source, extra_info=extra_info or {},
                                       lo=low, hi=high, created_by=user if getattr(user, "pk", None) else None)
    audit(actor=user, action="reward.probe_add", project=function.project, obj=probe,
          summary=f"{function.name}: probe {name} expects {low if low is not None else '-inf'}..."
                  f"{high if high is not None else '+inf'}")
    _requeue_latest(function, user, "probes changed")
    return probe


@transaction.atomic
def probe_delete(*, probe: RewardProbe, user) -> None:
    function = probe.function
    audit(actor=user, action="reward.probe_delete", project=function.project, obj=probe,
          summary=f"{function.name}: removed probe {probe.name}")
    probe.delete()
    _requeue_latest(function, user, "probes changed")


@transaction.atomic
def probe_scale_set(*, function: RewardFunction, user, scale: str, threshold: Any = None) -> RewardFunction:
    """Set what "scores low" means for the built-ins (see training.reward_probes.SCALE_LABELS)."""
    if scale not in SCALES:
        raise ApplicationError(f"Choose a scale: {', '.join(SCALES)}.", field="scale")
    value = _number(threshold, "threshold") if scale == "custom" else None
    if scale == "custom" and value is None:
        raise ApplicationError("Give the threshold the built-in probes must score at most.", field="threshold")
    before = {"scale": function.probe_scale, "threshold": function.probe_threshold}
    function.probe_scale, function.probe_threshold = scale, value if value is not None else 0.0
    function.save(update_fields=["probe_scale", "probe_threshold", "updated_at"])
    audit(actor=user, action="reward.probe_scale", project=function.project, obj=function,
          summary=f"{function.name}: built-in probes must score {low_rule(function).words}", before=before,
          after={"scale": scale, "threshold": function.probe_threshold})
    _requeue_latest(function, user, "probes changed")
    return function


@transaction.atomic
def probe_override(*, version: RewardVersion, user, reason: str) -> RewardProbeRun:
    """Let `version` launch despite its failing probes (current suite); the reason is audited and shown."""
    reason = (reason or "").strip()
    if len(reason) < 5:
        raise ApplicationError("Say why these failing probes are acceptable (at least a few words).", field="reason")
    status = probe_status(version)
    if status.state == "pending":
        raise ApplicationError("The probes have not run yet; there is nothing to override.", field="reason")
    if status.state == "passed":
        raise ApplicationError("Every probe passes; there is nothing to override.", field="reason")
    run = RewardProbeRun.objects.select_for_update().get(pk=status.run.pk)
    before = {"override_reason": run.override_reason or None}
    run.override_reason, run.overridden_by, run.overridden_at = reason[:2000], user, timezone.now()
    run.save(update_fields=["override_reason", "overridden_by", "overridden_at"])
    audit(actor=user, action="reward.probe_override", project=version.function.project, obj=run,
          summary=f"{version.function.name} v{version.number}: {run.failed_count} failing probe(s) overridden: "
                  f"{reason}"[:500],
          before=before, after={"override_reason": run.override_reason,
                                "failing": [r["name"] for r in run.failures]})
    return run


def probe_file_check(*, source: str, entry_point: str = "compute_score", probes: list[dict] | None = None,
                     scale: str = "unit", threshold: float = 0.0) -> dict[str, Any]:
    """The CLI form: run the suite on a reward file (nothing is stored). `probes` are dicts with
    name, solution_str, ground_truth, data_source, extra_info, lo, hi, prompt."""
    from webapp.rewards.services import _check_entry_point, validate_source

    entry_point = _check_entry_point(entry_point)
    source, _ = validate_source(source, entry_point)
    rule = LowRule(scale=scale, threshold=float(threshold))
    own = []
    for i, p in enumerate(probes or [], 1):
        if not isinstance(p, dict) or not isinstance(p.get("solution_str", p.get("response")), str):
            raise ApplicationError(f"Probe {i} needs a \"solution_str\" string.", field="probes")
        lo, hi = _number(p.get("lo"), "lo"), _number(p.get("hi"), "hi")
        if lo is None and hi is None:
            raise ApplicationError(f"Probe {i} needs \"lo\", \"hi\" or both.", field="probes")
        own.append(RewardProbe(pk=i, name=str(p.get("name") or f"probe {i}"), prompt=str(p.get("prompt") or ""),
                               solution_str=p.get("solution_str", p.get("response")),
                               ground_truth=p.get("ground_truth", ""), data_source=str(p.get("data_source") or ""),
                               extra_info=p.get("extra_info") or {}, lo=lo, hi=hi))
    probes_ = suite(RewardFunction(), own)
    outcome = evaluate(source=source, entry_point=entry_point, probes=probes_, rule=rule)
    return {"ok": outcome["failed_count"] == 0, "rule": f"built-in probes must score {rule.words}", **outcome}
