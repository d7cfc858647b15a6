"""What a web process does once it has started, before it serves."""
from __future__ import annotations

import gc


def freeze_startup_heap() -> None:
    """Load every view, then move everything alive into the collector's permanent generation.

    A web process holds about 125k objects once its apps, URLs and views are loaded, and each full
    collection walked them all: 45-90 ms added to whichever request it fell on (most of the checkpoint
    list's p95 in `bench/bench_scale.py`). Frozen objects are never walked again; what requests create is
    collected as before.
    """
    from django.urls import get_resolver

    get_resolver().url_patterns  # noqa: B018 - imports the URLconf and every view module
    gc.collect()
    gc.freeze()
