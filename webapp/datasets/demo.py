"""Demo datasets: 'demo-arithmetic' (a+b= prompts with ground truths) and 'demo-preferences'.

They come from training.demo's generators, so the demo reward and model match the data; both go
through the normal import service. Idempotent: a dataset that already has a ready version is kept.
"""
from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

import orjson

from webapp.datasets.models import Dataset, VersionStatus
from webapp.datasets.services import dataset_import

ARITHMETIC = "demo-arithmetic"
PREFERENCES = "demo-preferences"
WORD_PROBLEMS = "gsm8k-synthetic"


def _rows() -> tuple[list[dict], list[dict], str]:
    from training import demo as gen  # here: training.demo imports torch, which pages never need

    prompts = [{k: r[k] for k in ("prompt", "ground_truth", "data_source", "ability")} for r in gen.arithmetic_rows()]
    prefs = [{k: r[k] for k in ("prompt", "chosen", "rejected", "data_source")} for r in gen.preference_rows(120)]
    return prompts, prefs, "from training.demo"


def seed_demo(*, project, user, log: Callable[[str], None] = print) -> None:
    wanted = [name for name in (ARITHMETIC, PREFERENCES)
              if not Dataset.objects.filter(project=project, name=name, versions__status=VersionStatus.READY).exists()]
    if not wanted:
        return
    prompts, prefs, origin = _rows()
    with tempfile.TemporaryDirectory() as tmp:
        for name, rows, kind in ((ARITHMETIC, prompts, "prompts"), (PREFERENCES, prefs, "preference")):
            if name not in wanted:
                continue
            path = Path(tmp) / f"{name}.jsonl"
            path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
            version = dataset_import(project=project, user=user, name=name, path=path, kind=kind, split="10%",
                                     split_seed=0)
            log(f"imported dataset {name}: {version.row_count} rows ({origin})")


def seed_smollm2(*, project, user, log: Callable[[str], None] = print) -> None:
    """'gsm8k-synthetic': 2,000 training and 200 validation GSM8K-format word problems (training.wordproblems,
    seed 0), split as generated."""
    if Dataset.objects.filter(project=project, name=WORD_PROBLEMS, versions__status=VersionStatus.READY).exists():
        return
    from training import wordproblems

    with tempfile.TemporaryDirectory() as tmp:
        paths = wordproblems.write(tmp, n_train=2000, n_val=200, seed=0)
        version = dataset_import(project=project, user=user, name=WORD_PROBLEMS, path=paths["all"], kind="prompts")
    log(f"imported dataset {WORD_PROBLEMS}: {version.row_count} rows (training.wordproblems, seed 0)")
