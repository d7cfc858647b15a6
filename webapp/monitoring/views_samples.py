"""The sample browser (the run page's Samples tab, and the same as a page of its own).

One URL, its view chosen by `view`: `step` (a step's samples, filtered), `prompt` (one prompt across
steps), `group` (the n samples of one prompt at one step), `diff` (a prompt's response at two steps,
word by word) and `tokens` (one sample's tokens coloured by `by`: their KL contribution, advantage, entropy or
train-vs-rollout log-prob difference). `fragment=1` gives
the HTML fragment the tab swaps in; links and forms work as plain pages without JavaScript.
"""
from __future__ import annotations

from urllib.parse import urlencode

from django.shortcuts import render

from webapp.monitoring import sample_text
from webapp.monitoring import samples as sel
from webapp.monitoring.selectors import values_at_steps
from webapp.monitoring.views import _job

VIEWS = ("step", "prompt", "group", "diff", "tokens")
PROBS_DIFF = ("training/rollout_probs_diff_mean", "training/rollout_probs_diff_max")


class BadParam(ValueError):
    pass


def _int(params, name: str, default: int | None = None, low: int | None = 0) -> int | None:
    raw = (params.get(name) or "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadParam(f"{name} must be a whole number, got {raw[:40]!r}.") from None
    if low is not None and value < low:
        raise BadParam(f"{name} must be at least {low}, got {value}.")
    return value


def _float(params, name: str) -> float | None:
    raw = (params.get(name) or "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise BadParam(f"{name.replace('_', ' ')} must be a number, got {raw[:40]!r}.") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise BadParam(f"{name.replace('_', ' ')} must be a finite number.")
    return value


def parse_filters(params) -> sel.Filters:
    f = sel.Filters(component=(params.get("component") or "").strip()[:200], min_score=_float(params, "min_score"),
                    max_score=_float(params, "max_score"), min_length=_int(params, "min_length"),
                    max_length=_int(params, "max_length"), truncated=params.get("truncated") in ("1", "on", "true"),
                    errors=params.get("errors") in ("1", "on", "true"), prompt=(params.get("q") or "").strip()[:200])
    if f.min_score is not None and f.max_score is not None and f.min_score > f.max_score:
        raise BadParam("The lowest score is above the highest.")
    if f.min_length is not None and f.max_length is not None and f.min_length > f.max_length:
        raise BadParam("The shortest length is above the longest.")
    return f


class Links:
    """Query strings of the browser's own URL, keeping the kind (and the filters where they matter)."""

    def __init__(self, base: str, kind: str, keep: dict[str, str]):
        self.base, self.kind, self.keep = base, kind, keep

    def __call__(self, **params) -> str:
        q = {"kind": self.kind, **{k: v for k, v in params.items() if v is not None and v != ""}}
        return f"{self.base}?{urlencode(q)}"

    def step(self, step: int, page: int = 1) -> str:
        return self(view="step", step=step, page=page if page > 1 else None, **self.keep)


def _decorate(rows: list[dict], link: Links) -> None:
    for r in rows:
        r["links"] = {"prompt": link(view="prompt", prompt=r["prompt_key"]),
                      "group": link(view="group", step=r["step"], uid=r["uid"]),
                      "tokens": link(view="tokens", step=r["step"], offset=r["offset"])}


def samples(request, slug, job_id):
    access, job = _job(request, slug, job_id)
    run_dir = job.run_dir or ""
    available = {k: sel.steps(run_dir, k) for k in sel.KINDS}
    kind = request.GET.get("kind")
    if kind not in sel.KINDS:
        kind = "val" if available["val"] or not available["rollout"] else "rollout"
    view = request.GET.get("view") if request.GET.get("view") in VIEWS else "step"
    steps = available[kind]
    base = f"/p/{slug}/monitor/jobs/{job.pk}/samples/"
    ctx = {"project": access.project, "access": access, "job": job, "kind": kind, "kind_label": sel.KINDS[kind],
           "kinds": [{"kind": k, "label": label, "steps": len(available[k]), "url": f"{base}?kind={k}",
                      "current": k == kind} for k, label in sel.KINDS.items()],
           "steps": steps, "view": view, "base": base, "error": "", "max_columns": sel.MAX_COLUMNS}
    try:
        step = _int(request.GET, "step", steps[-1] if steps else None)
        if view == "step":
            filters = parse_filters(request.GET)
            ctx["filters"] = filters
        keep = {k: request.GET.get(k) for k in ("q", "component", "min_score", "max_score", "min_length",
                                                  "max_length", "truncated", "errors") if request.GET.get(k)}
        link = Links(base, kind, keep)
        ctx["link_step"] = link.step(step) if step is not None else link(view="step")
        if step is not None and step not in steps and view in ("step", "group", "tokens"):
            ctx["error"] = f"No {sel.KINDS[kind].lower()} samples at step {step}."
        elif view == "step" and step is not None:
            ctx.update(_step(run_dir, kind, step, filters, _int(request.GET, "page", 1, low=1), link))
        elif view == "prompt":
            ctx.update(_prompt(run_dir, kind, request.GET.get("prompt") or "", _int(request.GET, "start", 0), link))
        elif view == "group":
            ctx.update(_group(run_dir, kind, step, request.GET.get("uid") or "", link))
        elif view == "diff":
            ctx.update(_diff(run_dir, kind, request.GET, steps, link))
        elif view == "tokens":
            by = request.GET.get("by") if request.GET.get("by") in sample_text.TOKEN_VIEWS else "kl"
            ctx.update(_tokens(job, kind, step, _int(request.GET, "offset", 0), by, link))
        ctx["step"] = step
    except BadParam as exc:
        ctx["error"] = str(exc)
    template = "monitoring/_samples.html" if request.GET.get("fragment") else "monitoring/samples.html"
    return render(request, template, ctx)


def _step(run_dir, kind, step, filters, page, link) -> dict:
    data = sel.step_page(run_dir, kind, step, filters, page)
    _decorate(data["rows"], link)
    data["page"] = page
    data["prev_url"] = link.step(step, page - 1) if data["has_prev"] else ""
    data["next_url"] = link.step(step, page + 1) if data["has_next"] else ""
    data["has_reference"] = any(r.get("reference") not in (None, "") for r in data["rows"])
    return data


def _prompt(run_dir, kind, key, start, link) -> dict:
    data = sel.prompt_columns(run_dir, kind, key, start)
    if not data["columns"] and data["prompt"] is None and start == 0:
        return {"error": "That prompt is not in any logged step."}
    for col in data["columns"]:
        _decorate(col["samples"], link)
        col["group_url"] = link(view="group", step=col["step"], uid=col["uid"])
    data["prompt_key"] = key
    data["next_url"] = link(view="prompt", prompt=key, start=data["next_start"]) if data["next_start"] else ""
    data["first_url"] = link(view="prompt", prompt=key) if start else ""
    return {"across": data}


def _group(run_dir, kind, step, uid, link) -> dict:
    data = sel.group(run_dir, kind, step, uid)
    if data is None:
        return {"error": f"No group {uid!r} at step {step}."}
    _decorate(data["rows"], link)
    data["prompt_url"] = link(view="prompt", prompt=data["prompt_key"])
    return {"group": data}


def _diff(run_dir, kind, params, steps, link) -> dict:
    key = params.get("prompt") or ""
    a, b = _int(params, "a"), _int(params, "b")
    index = _int(params, "sample", 0)
    if a is None or b is None:
        raise BadParam("Pick the two steps to compare.")
    left, right = sel.sample_at(run_dir, kind, a, key, index), sel.sample_at(run_dir, kind, b, key, index)
    missing = [s for s, r in ((a, left), (b, right)) if r is None]
    if missing:
        raise BadParam(f"This prompt has no sample at step {', '.join(map(str, missing))}.")
    segments = sample_text.word_diff(left["output"], right["output"])
    return {"diff": {"a": left, "b": right, "segments": segments, "stats": sample_text.diff_stats(segments),
                     "prompt_url": link(view="prompt", prompt=key), "sample": index}}


def _tokens(job, kind, step, offset, by, link) -> dict:
    row = sel.entry_at(job.run_dir or "", kind, step, offset)
    if row is None:
        raise BadParam(f"No sample at that place of step {step}.")
    _decorate([row], link)
    mismatch = None
    if by == "mismatch" and kind == "rollout":  # what a backend that logs it only per step says about this step
        logged = values_at_steps(job, list(PROBS_DIFF), [step]).get(step, {})
        mismatch = {k.rsplit("_", 1)[-1]: logged[k] for k in PROBS_DIFF if k in logged}
    views = [{"by": key, "label": label, "current": key == by,
              "url": link(view="tokens", step=step, offset=offset, by=key)}
             for key, (label, _) in sample_text.TOKEN_VIEWS.items()]
    colours = sample_text.token_view(row, by, group_max_advantage=row.get("group_max_advantage"),
                                     step_mismatch=mismatch)
    return {"sample": row, "by": by, "token_views": views, "colours": colours,
            "tokens_html": sample_text.tokens_html(colours["tokens"], by)}
