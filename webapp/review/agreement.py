"""Inter-rater agreement statistics (nominal labels). Pure functions: no Django, no I/O.

Two input shapes:
- pairs of labels given by two raters to the same items (percent agreement, Cohen's kappa), either as
  a list of (a, b) tuples or as a contingency table {(a, b): count};
- per-item count vectors: units[u][c] = how many raters put item u in category c (Fleiss' kappa,
  Krippendorff's alpha, pairwise agreement). `weights[u]` repeats a vector `weights[u]` times, so the
  caller can pass each distinct vector once with its multiplicity (how the database stores them).

Every function returns None when the statistic is undefined (no data, or chance agreement is 1).
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable, Mapping, Sequence

Table = Mapping[tuple[Hashable, Hashable], int]


def contingency(pairs: Iterable[tuple[Hashable, Hashable]]) -> dict[tuple[Hashable, Hashable], int]:
    """Return {(label_a, label_b): count} for a list of two-rater label pairs."""
    return dict(Counter((a, b) for a, b in pairs))


def _as_table(pairs_or_table: Iterable[tuple[Hashable, Hashable]] | Table) -> Table:
    if isinstance(pairs_or_table, Mapping):
        return pairs_or_table
    return contingency(pairs_or_table)


def percent_agreement(pairs_or_table: Iterable[tuple[Hashable, Hashable]] | Table) -> float | None:
    """Share of items on which two raters gave the same label."""
    table = _as_table(pairs_or_table)
    n = sum(table.values())
    if n == 0:
        return None
    return sum(count for (a, b), count in table.items() if a == b) / n


def cohens_kappa(pairs_or_table: Iterable[tuple[Hashable, Hashable]] | Table) -> float | None:
    """Cohen's kappa for two raters: (p_o - p_e) / (1 - p_e), p_e from each rater's own marginals."""
    table = _as_table(pairs_or_table)
    n = sum(table.values())
    if n == 0:
        return None
    rows: Counter = Counter()
    cols: Counter = Counter()
    for (a, b), count in table.items():
        rows[a] += count
        cols[b] += count
    p_o = sum(count for (a, b), count in table.items() if a == b) / n
    p_e = sum(rows[c] * cols[c] for c in rows) / (n * n)
    if p_e >= 1.0:
        return None  # both raters used one and the same label throughout: kappa is 0/0
    return (p_o - p_e) / (1.0 - p_e)


def count_vectors(units: Iterable[Sequence[Hashable]], categories: Sequence[Hashable]) -> list[list[int]]:
    """Turn per-item label lists into count vectors over `categories` (unknown labels raise ValueError)."""
    position = {c: i for i, c in enumerate(categories)}
    out = []
    for labels in units:
        vector = [0] * len(categories)
        for label in labels:
            if label not in position:
                raise ValueError(f"Unknown label {label!r}; expected one of {list(categories)}")
            vector[position[label]] += 1
        out.append(vector)
    return out


def _weighted(units: Sequence[Sequence[int]], weights: Sequence[int] | None) -> list[tuple[Sequence[int], int]]:
    if weights is None:
        return [(u, 1) for u in units]
    if len(weights) != len(units):
        raise ValueError("weights must have one entry per unit")
    return [(u, w) for u, w in zip(units, weights, strict=True) if w]


def pairwise_agreement(units: Sequence[Sequence[int]], weights: Sequence[int] | None = None) -> float | None:
    """Share of agreeing rater pairs over all rater pairs within items (items with >= 2 ratings)."""
    agree = total = 0
    for vector, w in _weighted(units, weights):
        m = sum(vector)
        if m < 2:
            continue
        agree += w * sum(c * (c - 1) for c in vector)
        total += w * m * (m - 1)
    return agree / total if total else None


def fleiss_kappa(units: Sequence[Sequence[int]], weights: Sequence[int] | None = None) -> float | None:
    """Fleiss' kappa. Every item must have the same number of ratings n >= 2 (else ValueError)."""
    items = _weighted(units, weights)
    if not items:
        return None
    sizes = {sum(v) for v, _ in items}
    if len(sizes) != 1:
        raise ValueError(f"Fleiss' kappa needs the same number of ratings per item, got {sorted(sizes)}")
    n = sizes.pop()
    if n < 2:
        return None
    n_items = sum(w for _, w in items)
    k = len(items[0][0])
    totals = [0] * k
    p_bar = 0.0
    for vector, w in items:
        for j, c in enumerate(vector):
            totals[j] += w * c
        p_bar += w * (sum(c * c for c in vector) - n) / (n * (n - 1))
    p_bar /= n_items
    p_e = sum((t / (n_items * n)) ** 2 for t in totals)
    if p_e >= 1.0:
        return None
    return (p_bar - p_e) / (1.0 - p_e)


def krippendorff_alpha_nominal(units: Sequence[Sequence[int]], weights: Sequence[int] | None = None) -> float | None:
    """Krippendorff's alpha for nominal data; items may have different numbers of ratings.

    Items with fewer than two ratings are not pairable and are dropped. With o_cc the coincidences of
    category c with itself and n_c the pairable values of c (n = sum of n_c):
        alpha = ((n - 1) * sum_c o_cc - sum_c n_c (n_c - 1)) / (n (n - 1) - sum_c n_c (n_c - 1))
    """
    items = [(v, w) for v, w in _weighted(units, weights) if sum(v) >= 2]
    if not items:
        return None
    k = len(items[0][0])
    o_diag = 0.0
    n_c = [0] * k
    for vector, w in items:
        m = sum(vector)
        for j, c in enumerate(vector):
            o_diag += w * c * (c - 1) / (m - 1)
            n_c[j] += w * c
    n = sum(n_c)
    expected = sum(c * (c - 1) for c in n_c)
    denominator = n * (n - 1) - expected
    if denominator <= 0:
        return None  # a single category was used: no variation to agree on
    return ((n - 1) * o_diag - expected) / denominator
