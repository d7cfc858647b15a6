"""One streaming pass over a version's rows that feeds the pure checks of webapp.datasets.quality.

Rows are read in keyset chunks (bounded memory at any size); what grows with the row count is one
small integer per row for exact duplicates, the MinHash signatures of distinct rows and the lists of
row indices that cleaning may drop. The caller (webapp.datasets.quality_service) stores the result.
"""
from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from webapp.datasets import charts, stats
from webapp.datasets.models import DatasetRow, DatasetVersion
from webapp.datasets.quality import ALGORITHM, contamination, languages, pairs, task_types
from webapp.datasets.quality.near_dups import NearDuplicates, drop_all_but_first
from webapp.datasets.quality.near_dups import rule as near_dup_rule
from webapp.datasets.shapes import stored_value

Progress = Callable[[float, str], None]
CHUNK = 2000
EXAMPLES = 20  # clusters / duplicate groups listed in the report (all of them go to `drops`)
LISTED = 200  # contaminated and identical-pair rows listed in the report
LANGUAGE_SAMPLE = 100_000  # beyond this many rows, languages come from every k-th row
MEMBERS = 10  # rows shown per listed cluster
CATEGORIES = {
    "near_duplicates": "Near-duplicates: keep the first row of each cluster",
    "exact_duplicates": "Exact duplicates: keep the first copy",
    "contaminated": "Rows that overlap the evaluation sets",
    "identical_pairs": "Pairs whose chosen and rejected are identical or differ only in whitespace",
}
_FIELDS = ("index", "prompt", "prompt_text", "chosen_text", "rejected_text", "data_source", "ability", "row_hash")


def iter_chunks(version_id: int, fields: tuple[str, ...], chunk: int = CHUNK):
    """Lists of value tuples in index order (the first field must be `index`)."""
    last = -1
    base = DatasetRow.objects.filter(version_id=version_id).order_by("index").values_list(*fields)
    while True:
        rows = list(base.filter(index__gt=last)[:chunk])
        if not rows:
            return
        yield rows
        last = rows[-1][0]


def eval_index(eval_versions: list[DatasetVersion], n: int, progress: Progress) -> contamination.EvalIndex:
    index = contamination.EvalIndex(n)
    total = sum(v.row_count for v in eval_versions) or 1
    done = 0
    for number, version in enumerate(eval_versions):
        for rows in iter_chunks(version.pk, ("index", "prompt_text")):
            index.add(number, rows)
            done += len(rows)
            progress(0.1 * done / total, "reading the evaluation sets")
    return index.freeze()


def scan(version: DatasetVersion, *, eval_versions: list[DatasetVersion], ngram: int, threshold: float,
         progress: Progress) -> tuple[dict[str, Any], dict[str, list[int]]]:
    """The report's result (sections, figures, cleaning counts) and the row indices per cleaning category."""
    started = time.monotonic()
    preference = version.dataset.kind == "preference"
    evals = eval_index(eval_versions, ngram, progress) if eval_versions else None
    near = NearDuplicates(threshold)
    types: Counter[str] = Counter()
    type_examples: dict[str, list[int]] = {}
    langs: Counter[str] = Counter()
    first_of: dict[int, int] = {}  # 64-bit row hash prefix -> first row index with it
    exact_groups: dict[int, list[int]] = {}
    identical = {pairs.IDENTICAL: 0, pairs.WHITESPACE: 0}
    identical_rows: list[int] = []
    contaminated: list[int] = []
    contaminated_listed: list[dict[str, int]] = []
    seen = 0
    total = max(1, version.row_count)
    lang_step = -(-total // LANGUAGE_SAMPLE)
    for rows in iter_chunks(version.pk, _FIELDS):
        texts = []
        for index, prompt, prompt_text, chosen, rejected, source, ability, row_hash in rows:
            kind = task_types.classify(stored_value(prompt, prompt_text), prompt_text, ability=ability,
                                       data_source=source)
            types[kind] += 1
            if len(type_examples.setdefault(kind, [])) < 5:
                type_examples[kind].append(index)
            if index % lang_step == 0:
                langs[languages.detect(prompt_text)] += 1
            prefix = int(row_hash[:16], 16)
            first = first_of.setdefault(prefix, index)
            if first != index:
                exact_groups.setdefault(first, [first]).append(index)
            if preference:
                same = pairs.pair_identity(chosen, rejected)
                if same:
                    identical[same] += 1
                    identical_rows.append(index)
                texts.append(f"{prompt_text}\n{chosen}\n{rejected}")
            else:
                texts.append(prompt_text)
            if evals is not None:
                hit = evals.match(prompt_text)
                if hit:
                    contaminated.append(index)
                    if len(contaminated_listed) < LISTED:
                        source_set = eval_versions[hit[0]]
                        contaminated_listed.append({"index": index, "eval_version": source_set.pk,
                                                    "eval_dataset_id": source_set.dataset_id,
                                                    "eval_number": source_set.number, "eval_index": hit[1],
                                                    "matched": hit[2]})
        near.add([r[0] for r in rows], texts)
        seen += len(rows)
        progress(0.1 + 0.85 * seen / total, "checking rows")
    del first_of
    progress(0.96, "clustering")
    clusters = near.clusters()
    exact = sorted(exact_groups.values(), key=lambda g: g[0])
    drops = {"near_duplicates": drop_all_but_first(clusters), "exact_duplicates": drop_all_but_first(exact),
             "contaminated": contaminated}
    if preference:
        drops["identical_pairs"] = identical_rows
    sections: dict[str, Any] = {}
    figures: dict[str, Any] = {}
    coverage = task_types.coverage(types)
    for entry in coverage["table"]:
        entry["examples"] = type_examples.get(entry["type"], [])
    sections["task_types"] = coverage
    figures["task_types"] = charts.bar({task_types.LABELS[t]: coverage["counts"][t] for t in task_types.TYPES},
                                       title="Rows per task type", xaxis="task type")
    sizes = Counter(len(c) for c in clusters)
    sections["duplicates"] = {
        "exact": {"groups": len(exact), "rows": len(drops["exact_duplicates"]),
                  "examples": [{"size": len(g), "rows": g[:MEMBERS]} for g in exact[:EXAMPLES]],
                  "rule": "Rows with the same prompt, responses and ground truth (the row hash of the import)."},
        "near": {"clusters": len(clusters), "rows": len(drops["near_duplicates"]),
                 "rows_in_clusters": sum(len(c) for c in clusters), "largest": max(sizes, default=0),
                 "threshold": threshold, "rule": near_dup_rule(threshold, "prompt and both responses" if preference
                                                               else "prompt"),
                 "examples": [{"size": len(c), "rows": c[:MEMBERS]}
                              for c in sorted(clusters, key=lambda c: (-len(c), c[0]))[:EXAMPLES]]},
    }
    figures["duplicates"] = charts.bar({f"{k} rows": v for k, v in sorted(sizes.items())},
                                            title="Near-duplicate clusters by size", xaxis="cluster size")
    if preference:
        sections["identical_pairs"] = {**identical, "rows": len(identical_rows), "listed": identical_rows[:LISTED],
                                       "rule": pairs.RULE}
    sections["contamination"] = {
        "eval_sets": [{"id": v.pk, "dataset_id": v.dataset_id, "dataset": v.dataset.name, "number": v.number,
                       "rows": v.row_count} for v in eval_versions],
        "ngram": ngram, "rule": contamination.rule(ngram), "rows": len(contaminated),
        "share": len(contaminated) / total, "listed": contaminated_listed,
        "eval_ngrams": len(evals) if evals is not None else 0}
    if preference:
        numbers = stats.version_stats(version)
        figures["length_bias"] = numbers["figures"]["diff_chars"]
        sections["length_bias"] = {**numbers["numbers"]["diff_chars"],
                                   "sampled_rows": numbers["numbers"]["sampled_rows"]}
    top_lang = max(langs, key=langs.get) if langs else languages.UNKNOWN
    sampled = sum(langs.values()) or 1
    sections["languages"] = {"counts": dict(langs.most_common()), "top": top_lang,
                             "top_name": languages.name(top_lang), "top_share": langs[top_lang] / sampled,
                             "sampled": sum(langs.values()), "every": lang_step,
                             "table": [{"code": c, "name": languages.name(c), "rows": n, "share": n / sampled}
                                       for c, n in langs.most_common()],
                             "detector": languages.detector_name(), "rule": languages.rule()}
    figures["languages"] = charts.bar({f"{languages.name(c)} ({c})": n for c, n in langs.items()},
                                      title="Prompts per language", xaxis="language")
    result = {"algorithm": ALGORITHM, "rows": version.row_count, "kind": version.dataset.kind,
              "seconds": round(time.monotonic() - started, 2), "sections": sections, "figures": figures,
              "cleaning": {k: {"label": CATEGORIES[k], "rows": len(v)} for k, v in drops.items()},
              "near_duplicate_comparisons": near.compared}
    return result, drops
