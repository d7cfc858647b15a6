"""The dependency rules of docs/architecture.md, checked on the imports themselves.

Apps depend one way (the table below mirrors the docs), cross-app imports sit at the top of files where
a reader sees them, `training/` never imports Django or the web app, services never import task modules,
and no source file grows past 500 lines.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# app -> the apps it may import (the "May import" column of docs/architecture.md).
ALLOWED: dict[str, set[str]] = {
    "core": set(),
    "registry": {"core"},
    "datasets": {"core", "registry"},
    "review": {"core", "datasets"},
    "rewards": {"core", "datasets", "registry"},
    "runs": {"core", "datasets", "registry", "review", "rewards"},
    "notifications": {"core", "runs"},
    "monitoring": {"core", "datasets", "registry", "review", "rewards", "runs", "notifications"},
    "overview": {"core", "datasets", "registry", "review", "rewards", "runs", "monitoring", "notifications"},
}
MAX_LINES = 500


def _sources(*parts: str):
    for part in parts:
        for path in sorted((ROOT / part).rglob("*.py")):
            if "migrations" not in path.parts:
                yield path


def _imports(path: Path):
    """(module, is top-level, line) for every import in the file."""
    tree = ast.parse(path.read_text())
    top = {id(node) for node in tree.body}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module, id(node) in top, node.lineno
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, id(node) in top, node.lineno


def _app(path: Path) -> str | None:
    rel = path.relative_to(ROOT / "webapp").parts
    return rel[0] if len(rel) > 1 else None


def test_every_app_is_in_the_table():
    apps = {p.name for p in (ROOT / "webapp").iterdir() if (p / "apps.py").exists()}
    assert apps == set(ALLOWED)


def test_apps_depend_one_way_with_imports_at_the_top():
    wrong = []
    for path in _sources("webapp"):
        app = _app(path)
        if app is None:
            continue
        for module, at_top, line in _imports(path):
            if not module.startswith("webapp.") or module.count(".") < 1:
                continue
            target = module.split(".")[1]
            if target == app or target not in ALLOWED:
                continue
            where = f"{path.relative_to(ROOT)}:{line} imports {module}"
            if target not in ALLOWED[app]:
                wrong.append(f"{where} ({app} may not depend on {target})")
            elif not at_top and path.name != "apps.py":  # AppConfig.ready connects signals, Django's way
                wrong.append(f"{where} inside a function: put it at the top")
    assert wrong == []


def test_the_table_has_no_cycle():
    def visit(app: str, path: tuple[str, ...]) -> None:
        assert app not in path, f"cycle: {' -> '.join((*path, app))}"
        for dep in ALLOWED[app]:
            visit(dep, (*path, app))

    for app in ALLOWED:
        visit(app, ())


def test_training_never_imports_django_or_the_web_app():
    wrong = [f"{p.relative_to(ROOT)}:{line} imports {m}" for p in _sources("training")
             for m, _, line in _imports(p) if m.split(".")[0] in ("django", "webapp", "jobs", "rest_framework")]
    assert wrong == []


def test_services_send_tasks_by_name_instead_of_importing_them():
    wrong = [f"{p.relative_to(ROOT)}:{line} imports {m}" for p in _sources("webapp")
             for m, _, line in _imports(p) if m == "jobs" or m.startswith("jobs.")]
    assert wrong == []


@pytest.mark.parametrize("part", ["webapp", "training", "jobs", "bench", "scripts", "tests"])
def test_no_source_file_is_over_500_lines(part):
    long = {str(p.relative_to(ROOT)): n for p in _sources(part) if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def _training_modules(part: Path) -> set[str]:
    """The modules of training/ that the files under `part` import (inside functions too)."""
    used: set[str] = set()
    for path in _sources(str(part.relative_to(ROOT))):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "training" and not node.level:
                used |= {alias.name for alias in node.names}
            names = [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else \
                [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            used |= {name.split(".")[1] for name in names if name.startswith("training.")}
    return used


def test_the_docs_say_which_modules_of_training_each_part_uses():
    doc = (ROOT / "docs" / "architecture.md").read_text()
    section = doc.split("Which modules of `training/` each part uses")[1].split("\n\n")[1]
    documented = {}
    for row in section.splitlines()[2:]:
        part, modules = (cell.strip() for cell in row.strip("|").split("|"))
        documented[part.strip("`")] = {m.strip().strip("`") for m in modules.split(",")} - {"—"}
    parts = {f"webapp.{app}": ROOT / "webapp" / app for app in ALLOWED} | {"jobs": ROOT / "jobs"}
    assert documented == {name: _training_modules(folder) for name, folder in parts.items()}
