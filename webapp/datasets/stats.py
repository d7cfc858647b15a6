"""The stats page's numbers and figures for one version (cached: a ready version never changes)."""
from __future__ import annotations

import random
from functools import lru_cache
from typing import Any

from django.core.cache import cache
from django.db.models import F

from webapp.core.services import ApplicationError
from webapp.datasets import charts
from webapp.datasets.models import DatasetRow, DatasetVersion

MAX_LENGTH_ROWS = 500_000  # beyond this, lengths come from every k-th row
TOKEN_SAMPLE = 2_000  # rows tokenised for the token-length charts
CACHE_VERSION = 1


@lru_cache(maxsize=4)
def load_tokenizer(path: str):
    """A registered model's tokenizer (PreTrainedTokenizerFast: AutoTokenizer may rebuild custom ones)."""
    from transformers import PreTrainedTokenizerFast

    try:
        return PreTrainedTokenizerFast.from_pretrained(path)
    except Exception as exc:  # noqa: BLE001 - any loader failure is the user's model folder, shown as such
        raise ApplicationError(f"Could not load a tokenizer from {path}: {exc}", field="tokenizer") from None


def _lengths(version: DatasetVersion) -> dict[str, list[int]]:
    qs = DatasetRow.objects.filter(version=version)
    if version.row_count > MAX_LENGTH_ROWS:
        step = -(-version.row_count // MAX_LENGTH_ROWS)
        qs = qs.annotate(_m=F("index") % step).filter(_m=0)
    out: dict[str, list[int]] = {"prompt": [], "chosen": [], "rejected": []}
    for p, c, r in qs.values_list("prompt_chars", "chosen_chars", "rejected_chars").iterator(chunk_size=5000):
        out["prompt"].append(p)
        out["chosen"].append(c)
        out["rejected"].append(r)
    return out


def _token_lengths(version: DatasetVersion, tokenizer, sample: int) -> dict[str, list[int]]:
    n = version.row_count
    indices = sorted(random.Random(0).sample(range(n), min(sample, n)))
    out: dict[str, list[int]] = {"prompt": [], "chosen": [], "rejected": []}
    fields = ("prompt_text", "chosen_text", "rejected_text")
    for start in range(0, len(indices), 500):
        rows = list(DatasetRow.objects.filter(version=version, index__in=indices[start:start + 500])
                    .order_by("index").values_list(*fields))
        if not rows:
            continue
        for name, column in zip(("prompt", "chosen", "rejected"), zip(*rows, strict=True), strict=True):
            texts = list(column)
            if not any(texts):
                continue
            ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
            out[name].extend(len(x) for x in ids)
    return out


def version_stats(version: DatasetVersion, *, tokenizer_path: str | None = None,
                  token_sample: int = TOKEN_SAMPLE) -> dict[str, Any]:
    key = f"datasets:stats:{CACHE_VERSION}:{version.pk}:{version.content_hash}:{tokenizer_path or '-'}"
    cached = cache.get(key)
    if cached is not None:
        return cached
    preference = version.dataset.kind == "preference"
    report = version.report or {}
    lengths = _lengths(version)
    figures: dict[str, Any] = {}
    numbers: dict[str, Any] = {"rows": version.row_count, "sampled_rows": len(lengths["prompt"])}
    figures["prompt_chars"] = charts.histogram({"prompt": lengths["prompt"]}, title="Prompt length (characters)",
                                               xaxis="characters")
    numbers["prompt_chars"] = charts.summary(lengths["prompt"])
    if preference:
        figures["response_chars"] = charts.histogram({"chosen": lengths["chosen"], "rejected": lengths["rejected"]},
                                                     title="Response length (characters)", xaxis="characters")
        figures["diff_chars"], numbers["diff_chars"] = charts.length_difference(lengths["chosen"],
                                                                                lengths["rejected"])
        numbers["chosen_chars"] = charts.summary(lengths["chosen"])
        numbers["rejected_chars"] = charts.summary(lengths["rejected"])
    if tokenizer_path:
        tokens = _token_lengths(version, load_tokenizer(tokenizer_path), token_sample)
        numbers["token_sample"] = len(tokens["prompt"])
        figures["prompt_tokens"] = charts.histogram({"prompt": tokens["prompt"]}, title="Prompt length (tokens)",
                                                    xaxis="tokens")
        numbers["prompt_tokens"] = charts.summary(tokens["prompt"])
        if preference:
            figures["response_tokens"] = charts.histogram({"chosen": tokens["chosen"], "rejected": tokens["rejected"]},
                                                          title="Response length (tokens)", xaxis="tokens")
            figures["diff_tokens"], numbers["diff_tokens"] = charts.length_difference(
                tokens["chosen"], tokens["rejected"], unit="tokens")
    sources = report.get("data_sources", {})
    figures["sources"] = charts.bar(sources.get("top", {}), title="Data sources", xaxis="data_source")
    numbers["sources_distinct"] = sources.get("distinct", 0)
    numbers["duplicates"] = report.get("duplicates", {"groups": 0, "rows": 0, "examples": []})
    result = {"figures": figures, "numbers": numbers}
    cache.set(key, result, timeout=None)
    return result
