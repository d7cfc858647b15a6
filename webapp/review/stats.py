"""Agreement and reviewer statistics of a version, read from the stored counters (never a full scan)."""
from __future__ import annotations

from collections import Counter, defaultdict

from django.contrib.auth import get_user_model

from webapp.datasets.models import DatasetVersion
from webapp.review import agreement
from webapp.review.models import LABELS, PairAgreement, Review, ReviewerStats, VersionReviewStats, VoteProfile


def _median_time_ms(version: DatasetVersion, reviewer_id: int, n: int) -> float | None:
    """Median of a reviewer's time per item: an index range read at the middle, not a sort of all rows."""
    if n <= 0:
        return None
    middle = list(Review.objects.filter(version=version, reviewer_id=reviewer_id).order_by("time_ms")
                  .values_list("time_ms", flat=True)[(n - 1) // 2: n // 2 + 1])
    return sum(middle) / len(middle) if middle else None


def version_stats(*, version: DatasetVersion, overlap: int) -> dict:
    """Dataset-level agreement (pairwise %, Fleiss' kappa, Krippendorff's alpha), per reviewer pair
    (percent agreement, Cohen's kappa) and per reviewer (done, time per item, agreement with the final)."""
    counters = VersionReviewStats.objects.filter(pk=version.pk).first()
    profiles = list(VoteProfile.objects.filter(version=version, count__gt=0)
                    .values_list("approve", "swap", "reject", "flag", "count"))
    vectors = [list(p[:4]) for p in profiles]
    weights = [p[4] for p in profiles]
    multi = [(v, w) for v, w in zip(vectors, weights, strict=True) if sum(v) >= 2]
    sizes = Counter()
    for v, w in multi:
        sizes[sum(v)] += w
    # Fleiss needs one number of ratings per item: the configured overlap, or else the most common one.
    fleiss_n = overlap if sizes.get(overlap) else (sizes.most_common(1)[0][0] if sizes else None)
    fleiss_units = [(v, w) for v, w in multi if sum(v) == fleiss_n]
    dataset = {
        "reviewed_items": sum(weights),
        "multi_rated_items": sum(w for _, w in multi),
        "pairwise_agreement": agreement.pairwise_agreement([v for v, _ in multi], [w for _, w in multi]),
        "unanimous_share": (sum(w for v, w in multi if max(v) == sum(v)) / sum(w for _, w in multi)) if multi else None,
        "krippendorff_alpha": agreement.krippendorff_alpha_nominal([v for v, _ in multi], [w for _, w in multi]),
        "fleiss_kappa": agreement.fleiss_kappa([v for v, _ in fleiss_units], [w for _, w in fleiss_units])
        if fleiss_units else None,
        "fleiss_raters": fleiss_n,
        "fleiss_items": sum(w for _, w in fleiss_units),
        "label_totals": dict(zip(LABELS, [sum(v[i] * w for v, w in zip(vectors, weights, strict=True))
                                          for i in range(len(LABELS))], strict=True)),
    }
    users = {u.pk: u.username for u in get_user_model().objects.filter(
        pk__in=ReviewerStats.objects.filter(version=version).values("reviewer_id"))}
    tables: dict[tuple[int, int], dict] = defaultdict(dict)
    for a, b, la, lb, count in (PairAgreement.objects.filter(version=version, count__gt=0)
                                .values_list("rater_a_id", "rater_b_id", "label_a", "label_b", "count")):
        tables[(a, b)][(la, lb)] = count
    pairs = []
    for (a, b), table in sorted(tables.items()):
        pairs.append({"rater_a": users.get(a, str(a)), "rater_b": users.get(b, str(b)), "items": sum(table.values()),
                      "percent_agreement": agreement.percent_agreement(table),
                      "cohens_kappa": agreement.cohens_kappa(table)})
    reviewers = []
    for rs in ReviewerStats.objects.filter(version=version).order_by("reviewer_id"):
        reviewers.append({
            "reviewer": users.get(rs.reviewer_id, str(rs.reviewer_id)), "reviewer_id": rs.reviewer_id,
            "done": rs.done, "assigned": rs.assigned, "open": rs.assigned - rs.done,
            "median_time_ms": (median := _median_time_ms(version, rs.reviewer_id, rs.done)),
            "median_time_s": round(median / 1000, 1) if median is not None else None,
            "mean_time_ms": rs.time_ms_total / rs.done if rs.done else None,
            "final_items": rs.final_total,
            "agreement_with_final": rs.final_agree / rs.final_total if rs.final_total else None,
        })
    states = {}
    if counters is not None:
        states = {s: counters.count(s) for s in ("unreviewed", "approved", "rejected", "flagged", "conflict")}
    return {
        "version_id": version.pk, "overlap": overlap,
        "total": counters.total if counters else version.row_count,
        "reviews": counters.reviews if counters else 0,
        "states": states, "dataset": dataset, "pairs": pairs, "reviewers": reviewers,
    }
