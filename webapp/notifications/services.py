"""Notifications: what happened to a run, sent to the project's hooks through the Celery worker.

`notify(project, event, ...)` logs one Delivery per hook that wants the event and hands each to the
worker after the transaction commits; `deliver(id)` sends one (webhook or e-mail) and records the
status, response code and attempt count; the task retries failures that may pass with exponential
backoff (a failure no retry can mend, `transport.PermanentError`, is final at once).
JSON webhooks carry `X-Workbench-Signature: sha256=<hex HMAC-SHA256 of "<timestamp>." + body>` with the
hook's secret and `X-Workbench-Timestamp`.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
import time
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction
from django.utils import timezone

from webapp.core import queue
from webapp.core.audit import audit
from webapp.core.models import Project
from webapp.core.services import ApplicationError
from webapp.notifications import transport
from webapp.notifications.models import EVENTS, Delivery, DeliveryStatus, Hook, HookKind
from webapp.runs.models import MetricPoint

logger = logging.getLogger(__name__)
MAX_ATTEMPTS = 5
KEY_FIGURES = (("critic/score/mean", "reward"), ("actor/kl_loss", "KL"), ("actor/entropy", "entropy"))
TITLES = {"job.finished": "Run finished", "job.failed": "Run failed", "job.lost": "Run lost",
          "job.stalled": "Run stalled", "guard.tripped": "Health rule tripped",
          "evaluation.finished": "Evaluation finished", "human_eval.assigned": "Human evaluation to judge",
          "human_eval.gap": "Reward may be hacked"}


def backoff_s(attempt: int) -> float:
    """Seconds before retry number `attempt` (1-based): 10, 20, 40, 80 s, at most 10 min."""
    return float(min(600, 10 * 2 ** max(0, attempt - 1)))


def sign(secret: str, timestamp: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()


def _job_summary(job) -> dict[str, Any]:
    figures = {}
    for name, label in KEY_FIGURES:
        value = (MetricPoint.objects.filter(job=job, name=name, value__isnull=False).order_by("-step")
                 .values_list("value", flat=True).first())
        if value is not None:
            figures[label] = round(float(value), 4)
    rate = (MetricPoint.objects.filter(job=job, name__startswith="val-core/", name__endswith="/win_rate",
                                       value__isnull=False).order_by("-step").values_list("value", flat=True).first())
    if rate is not None:
        figures["validation win rate"] = round(float(rate), 4)
    return {"id": job.pk, "name": job.name, "kind": job.kind, "state": job.state, "last_step": job.last_step,
            "figures": figures}


def build_payload(project: Project, event: str, *, job=None, message: str = "", data: dict | None = None
                  ) -> dict[str, Any]:
    base = settings.SITE_URL.rstrip("/")
    url = f"{base}/p/{project.slug}/jobs/{job.pk}/" if job is not None else f"{base}/p/{project.slug}/"
    out: dict[str, Any] = {"event": event, "title": TITLES.get(event, event), "project": project.slug,
                           "message": message, "url": url, "time": timezone.now().isoformat()}
    if job is not None:
        out["job"] = _job_summary(job)
    if data:
        out["data"] = data
    return out


def notify(project: Project, event: str, *, job=None, message: str = "", data: dict | None = None) -> list[Delivery]:
    """Log and queue one delivery per hook of `project` that wants `event`; never raises."""
    try:
        hooks = [h for h in Hook.objects.filter(project=project, enabled=True) if h.wants(event)]
        if not hooks:
            return []
        payload = build_payload(project, event, job=job, message=message, data=data)
        out = [Delivery.objects.create(hook=h, event=event, payload=payload) for h in hooks]
        for d in out:
            transaction.on_commit(lambda pk=d.pk: queue.enqueue(queue.DELIVER_NOTIFICATION, pk))
        return out
    except Exception:  # noqa: BLE001 - a notification must never break what it reports on
        logger.exception("notify %s failed for project %s", event, project.pk)
        return []


def _body(hook: Hook, payload: dict[str, Any]) -> bytes:
    if hook.kind == HookKind.SLACK:
        figures = ", ".join(f"{k} {v}" for k, v in ((payload.get("job") or {}).get("figures") or {}).items())
        job = payload.get("job")
        head = f"*{payload['title']}*" + (f" · run #{job['id']} {job['name']} ({job['state']})" if job else "")
        text = "\n".join(x for x in (head, payload.get("message", ""), figures, f"<{payload['url']}|Open>") if x)
        return json.dumps({"text": text}).encode()
    return json.dumps(payload, sort_keys=True).encode()


def deliver(delivery_id: int) -> str:
    """Send one delivery; returns "sent", "retry" (a retryable failure) or "failed" (final)."""
    d = Delivery.objects.select_related("hook", "hook__project").filter(pk=delivery_id).first()
    if d is None or d.status == DeliveryStatus.SENT:
        return "sent"
    hook = d.hook
    d.attempts += 1
    code, error = None, ""
    try:
        if hook.kind == HookKind.EMAIL:
            to = [e.strip() for e in hook.emails.split(",") if e.strip()]
            transport.send_email(f"[{hook.project.name}] {d.payload.get('title', d.event)}",
                      f"{d.payload.get('message', '')}\n\n{json.dumps(d.payload.get('job') or {}, indent=2)}\n\n"
                      f"{d.payload.get('url', '')}", settings.DEFAULT_FROM_EMAIL, to)
        else:
            body = _body(hook, d.payload)
            headers = {"Content-Type": "application/json", "User-Agent": "rlhf-workbench", "X-Workbench-Event": d.event}
            if hook.kind == HookKind.JSON:
                ts = str(int(time.time()))
                headers.update({"X-Workbench-Timestamp": ts, "X-Workbench-Signature": sign(hook.secret, ts, body)})
            code = transport.post(hook.url, body, headers, allow_private=settings.NOTIFY_ALLOW_PRIVATE_HOSTS)
            if not 200 <= code < 300:
                error = f"HTTP {code}"
    except transport.PermanentError as exc:
        d.status, d.error = DeliveryStatus.FAILED, str(exc)[:500]  # refused: retrying cannot help
        d.save(update_fields=["status", "error", "attempts"])
        return "failed"
    except Exception as exc:  # noqa: BLE001 - network errors, SMTP errors: logged and retried
        error = f"{type(exc).__name__}: {exc}"
    d.response_code = code
    if not error:
        d.status, d.error, d.sent_at = DeliveryStatus.SENT, "", timezone.now()
        d.save(update_fields=["status", "error", "sent_at", "attempts", "response_code"])
        return "sent"
    retry = d.attempts < MAX_ATTEMPTS and (code is None or code >= 500 or code == 429)
    d.status, d.error = (DeliveryStatus.PENDING if retry else DeliveryStatus.FAILED), error[:500]
    d.save(update_fields=["status", "error", "attempts", "response_code"])
    return "retry" if retry else "failed"


# -- hooks (admins) ---------------------------------------------------------------------------------

def hook_create(*, project: Project, user, name: str, kind: str, url: str = "", emails: str = "",
                events: list[str] | None = None) -> Hook:
    name, url, emails = (name or "").strip(), (url or "").strip(), (emails or "").strip()
    events = list(events or [])
    if not name:
        raise ApplicationError("Give the hook a name.", field="name")
    if kind not in HookKind.values:
        raise ApplicationError(f"Choose a kind: {', '.join(HookKind.values)}.", field="kind")
    unknown = sorted(set(events) - set(EVENTS))
    if unknown:
        raise ApplicationError(f"Unknown events {unknown}; choose from {', '.join(EVENTS)}.", field="events")
    if kind == HookKind.EMAIL:
        emails = ", ".join(clean_emails(emails))
        url = ""
    else:
        try:
            transport.resolve(url, allow_private=settings.NOTIFY_ALLOW_PRIVATE_HOSTS)
        except transport.UnsafeURL as exc:
            raise ApplicationError(str(exc), field="url") from None
        emails = ""
    hook = Hook.objects.create(project=project, name=name[:100], kind=kind, url=url, emails=emails, events=events,
                               secret=secrets.token_hex(32) if kind == HookKind.JSON else "", created_by=user)
    audit(actor=user, action="hook.create", project=project, obj=hook, summary=f"Hook {hook.name} ({kind})",
          after={"kind": kind, "url": transport.redact(url) if url else "", "events": events})
    return hook


def clean_emails(text: str) -> list[str]:
    """The comma-separated addresses of an e-mail hook, each one checked (a line break in one would be a header
    injection, and the mail library refuses to send it at all)."""
    addresses = [e.strip() for e in text.split(",") if e.strip()]
    if not addresses:
        raise ApplicationError("List one or more e-mail addresses, separated by commas.", field="emails")
    for address in addresses:
        try:
            validate_email(address)
        except ValidationError:
            raise ApplicationError(f"{address!r} is not an e-mail address.", field="emails") from None
    return addresses


def hook_delete(*, hook: Hook, user) -> None:
    audit(actor=user, action="hook.delete", project=hook.project, obj=hook, summary=f"Hook {hook.name} deleted")
    hook.delete()


def hook_test(*, hook: Hook, user) -> Delivery:
    payload = build_payload(hook.project, "test", message=f"A test from {getattr(user, 'username', 'the app')}.")
    d = Delivery.objects.create(hook=hook, event="test", payload=payload)
    transaction.on_commit(lambda: queue.enqueue(queue.DELIVER_NOTIFICATION, d.pk))
    return d


def delivery_resend(*, delivery: Delivery, user) -> Delivery:
    """A new delivery of the same payload (the log keeps the old one)."""
    d = Delivery.objects.create(hook=delivery.hook, event=delivery.event, payload=delivery.payload)
    audit(actor=user, action="delivery.resend", project=delivery.hook.project, obj=d,
          summary=f"Re-sent {delivery.event} to {delivery.hook.name}")
    transaction.on_commit(lambda: queue.enqueue(queue.DELIVER_NOTIFICATION, d.pk))
    return d


def hook_json(hook: Hook) -> dict[str, Any]:
    """A hook as shown back: the URL's host only, never the secret."""
    return {"id": hook.pk, "name": hook.name, "kind": hook.kind, "url": transport.redact(hook.url) if hook.url else "",
            "emails": hook.emails, "events": hook.events, "enabled": hook.enabled}
