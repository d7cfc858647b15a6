"""Starter reward functions (VERL `compute_score` files) offered in the reward editor.

Each template is a plain .py file in this folder that defines `compute_score` and starts with a
docstring (first line: the title). They use the standard library (`gsm8k_verl` also loads VERL's
own scorer file), so they run unchanged in the reward sandbox and in VERL. This module reads them as
text; it never imports them.
"""
from __future__ import annotations

import ast
from pathlib import Path

_DIR = Path(__file__).parent
ORDER = ("exact_match", "gsm8k_verl", "gsm8k_exact", "gsm8k_format", "boxed_math", "format_regex", "length_penalty",
         "combined")


def list_templates() -> list[dict[str, str]]:
    """[{"name", "title", "description", "source"}] for every template, in a stable order."""
    out = []
    for name in ORDER:
        source = (_DIR / f"{name}.py").read_text()
        doc = ast.get_docstring(ast.parse(source)) or name
        title, _, rest = doc.partition("\n")
        out.append({"name": name, "title": title.strip(), "description": " ".join(rest.split()),
                    "source": source})
    return out


def get_template(name: str) -> str:
    """The source of one template; KeyError with the known names for an unknown one."""
    if name not in ORDER:
        raise KeyError(f"no reward template {name!r}; known: {', '.join(ORDER)}")
    return (_DIR / f"{name}.py").read_text()
