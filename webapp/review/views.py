"""Review pages: version list, the review screen (driven by the JSON API), bulk list, stats, conflicts."""
from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.http import Http404
from django.shortcuts import redirect, render
from django.template.defaultfilters import pluralize
from django.urls import reverse
from django.views.decorators.http import require_POST

from webapp.core.access import project_access
from webapp.core.forms import apply_error
from webapp.core.models import Role
from webapp.core.services import ApplicationError
from webapp.core.text import count
from webapp.datasets.forms import ExportForm
from webapp.datasets.views import export_response, version_url
from webapp.review import exports, selectors, services
from webapp.review.forms import BulkForm, PairFilterForm, ReleaseForm, ResolveForm
from webapp.review.models import ReviewerStats, Source, VersionReviewStats
from webapp.review.stats import version_stats


def _ctx(access, version=None, **extra) -> dict:
    return {"project": access.project, "access": access, "version": version, **extra}


def _after(request) -> int | None:
    raw = request.GET.get("after", "")
    return int(raw) if raw.isdigit() else None


def index(request, slug):
    access = project_access(request.user, slug)
    versions = list(selectors.review_versions(access.project))
    counters = {s.pk: s for s in VersionReviewStats.objects.filter(pk__in=[v.pk for v in versions])}
    mine = {s.version_id: s for s in ReviewerStats.objects.filter(version__in=versions, reviewer=request.user)}
    rows = [{"version": v, "stats": counters.get(v.pk), "mine": mine.get(v.pk),
             "left": selectors.queue_left(version=v, total=counters[v.pk].total if v.pk in counters else v.row_count,
                                          mine=mine.get(v.pk))} for v in versions]
    return render(request, "review/index.html", _ctx(access, rows=rows))


def screen(request, slug, version_id):
    access, version = selectors.review_access(request.user, slug, version_id, Role.REVIEWER)
    try:
        services.ensure_pair_states(version=version)
    except ApplicationError as exc:
        messages.error(request, exc.message)
        return redirect("review-index", slug=slug)
    api = f"/api/projects/{slug}/review/versions/{version.pk}/"
    start_row = request.GET.get("row", "")
    return render(request, "review/screen.html", _ctx(access, version, api=api,
                                                       start_row=start_row if start_row.isdigit() else ""))


def _reviewer_choices(project) -> list[tuple[int, str]]:
    return list(get_user_model().objects.filter(memberships__project=project, memberships__role__in=[
        Role.REVIEWER, Role.ENGINEER, Role.ADMIN]).order_by("username").values_list("pk", "username"))


def pairs(request, slug, version_id):
    access, version = selectors.review_access(request.user, slug, version_id, Role.ENGINEER)
    try:
        counters = services.ensure_pair_states(version=version)
    except ApplicationError as exc:
        messages.error(request, exc.message)
        return redirect("review-index", slug=slug)
    filter_form = PairFilterForm(request.GET or None, sources=counters.data_sources,
                                 reviewers=_reviewer_choices(access.project))
    pair_filter = filter_form.to_filter()
    bulk_form = BulkForm(request.POST or None)
    if request.method == "POST" and bulk_form.is_valid():
        if bulk_form.cleaned_data["scope"] == "matching":
            row_ids = selectors.pair_row_ids(version=version, f=pair_filter, limit=services.BULK_MAX_ROWS + 1)
        else:
            row_ids = bulk_form.cleaned_data["rows"]
        try:
            n = services.bulk_apply(actor=request.user, project=access.project, version=version, row_ids=row_ids,
                                    action=bulk_form.cleaned_data["action"])
        except ApplicationError as exc:
            apply_error(bulk_form, exc)
        else:
            messages.success(request, f"{bulk_form.cleaned_data['action'].capitalize()} applied to {n:,} "
                                      f"pair{pluralize(n)}.")
            return redirect(request.get_full_path())
    page, next_after, searched_to = selectors.pairs_page(version=version, f=pair_filter, after=_after(request))
    rows = _list_rows(page)
    query = request.GET.copy()
    query.pop("after", None)
    # Exact totals come from the counters when only the state is filtered; otherwise none (no COUNT(*)).
    total = None
    if pair_filter.is_empty():
        total = counters.total
    elif _only_state(pair_filter):
        total = counters.count(pair_filter.state)
    return render(request, "review/pairs.html", _ctx(
        access, version, filter_form=filter_form, bulk_form=bulk_form, rows=rows, next_after=next_after,
        query=query.urlencode(), total=total, bulk_max=services.BULK_MAX_ROWS, searched_to=searched_to,
        item_base=reverse("review-item", args=[slug, version.pk, 0]).removesuffix("0/")))


def _list_rows(page) -> list[dict]:
    """Plain strings per row: the template engine resolves a few names per row instead of dozens."""
    reviews = selectors.reviews_by_row([s.pk for s in page])
    sources = dict(Source.choices)
    rows = []
    for s in page:
        votes = f"{s.votes_approve}/{s.votes_swap}/{s.votes_reject}/{s.votes_flag}"
        said = [f"{r.reviewer.username}: {r.label}" + (f" ({r.reason})" if r.reason else "")
                for r in reviews.get(s.pk, [])]
        prompt = s.row.prompt_text
        rows.append({"pk": s.pk, "index": s.row_index, "state": s.state, "swapped": s.final_swap,
                     "source": sources.get(s.decision_source, "") if s.decision_source else "", "votes": votes,
                     "reviews": said, "data_source": s.row.data_source,
                     "excerpt": prompt if len(prompt) <= 160 else prompt[:159] + "…"})
    return rows


def _only_state(f: selectors.PairFilter) -> bool:
    return selectors.PairFilter(state=f.state) == f


def stats(request, slug, version_id):
    access, version = selectors.review_access(request.user, slug, version_id, Role.VIEWER)
    data = version_stats(version=version, overlap=access.project.review_overlap)
    return render(request, "review/stats.html", _ctx(access, version, stats=data))


def conflicts(request, slug, version_id):
    access, version = selectors.review_access(request.user, slug, version_id, Role.ENGINEER)
    page, next_after = selectors.conflicts_page(version=version, after=_after(request))
    counters = VersionReviewStats.objects.filter(pk=version.pk).first()
    return render(request, "review/conflicts.html", _ctx(
        access, version, rows=_list_rows(page), next_after=next_after, counters=counters,
        item_base=reverse("review-item", args=[slug, version.pk, 0]).removesuffix("0/"),
        here=request.get_full_path()))


def item(request, slug, version_id, row_id):
    access, version = selectors.review_access(request.user, slug, version_id, Role.ENGINEER)
    services.ensure_pair_states(version=version)
    row = selectors.load_row(version, row_id)
    if row is None:
        raise Http404("No such pair in this dataset version.")
    form = ResolveForm(request.POST or None)
    if request.method == "POST":
        project_access(request.user, slug, Role.ADMIN)
        if form.is_valid():
            try:
                services.conflict_resolve(actor=request.user, project=access.project, row=row,
                                          label=form.cleaned_data["label"])
            except ApplicationError as exc:
                apply_error(form, exc)
            else:
                messages.success(request, f"Row {row.index} resolved: {form.cleaned_data['label']}.")
                nxt = _safe_next(request.POST.get("next", ""))
                if nxt:
                    return redirect(nxt)
                return redirect(reverse("review-item", args=[slug, version.pk, row.pk]))
    payload = selectors.item_payload(row=row, user=request.user, access=access)
    # The item page shows the dataset's orientation: chosen on the left.
    panes = sorted([payload["left"], payload["right"]], key=lambda pane: pane["side"] != "chosen")
    return render(request, "review/item.html", _ctx(
        access, version, row=row, payload=payload, panes=panes, prompt_html=payload["prompt_html"], form=form,
        edits=row.response_edits.select_related("author").order_by("side", "revision"),
        next=_safe_next(request.GET.get("next", ""))))


def _safe_next(url: str) -> str:
    # Only paths inside the app: never an absolute URL or a javascript: link.
    return url if url.startswith("/p/") and not url.startswith("//") else ""


@require_POST
def release(request, slug, version_id):
    access, version = selectors.review_access(request.user, slug, version_id, Role.ADMIN)
    form = ReleaseForm(request.POST)
    if form.is_valid():
        reviewer = get_user_model().objects.filter(pk=form.cleaned_data["reviewer"]).first()
        if reviewer is None:
            messages.error(request, "No such reviewer.")
        else:
            n = services.assignments_release(actor=request.user, project=access.project, version=version,
                                             reviewer=reviewer)
            messages.success(request, f"Released {count(n, 'open pair')} of {reviewer.username}.")
    else:
        messages.error(request, "Choose a reviewer.")
    return redirect("review-stats", slug=slug, version_id=version.pk)


def export(request, slug, version_id):
    """Download the approved pairs of a version (edits and swaps applied) as VERL, TRL or plain JSONL."""
    access, version = selectors.review_access(request.user, slug, version_id, Role.ENGINEER)
    form = ExportForm(request.GET)
    if not form.is_valid():
        messages.error(request, "Choose an export format: verl, trl or jsonl.")
        return redirect(version_url(version))

    def on_error(message):
        messages.error(request, message)
        return redirect(version_url(version))

    return export_response(version, form.cleaned_data, user=request.user, on_error=on_error,
                           rows=exports.approved_rows(version), label=exports.LABEL)
