"""A count and its noun agree: "1 pair", "2 pairs", never "1 preference pairs". Templates use Django's
`pluralize`, scripts `wb.count` (app.js), Python messages `webapp.core.text.count`; the scans below find a
number printed before a plural noun without them."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from webapp.core.text import count

ROOT = Path(__file__).resolve().parents[3]
NOUNS = ("rows|pairs|samples|prompts|steps|tokens|verdicts|judgements|checkpoints|jobs|runs|files|reviews|items|"
         "responses|characters|copies|probes|raters|datasets|members|functions|clusters|groups|errors|points|"
         "reviewers|decisions|prompts")
# {{ n }} or {{ n }}</strong>, up to two words, then a plural noun
TEMPLATE_COUNT = re.compile(r"\{\{\s*([^}]+?)\s*\}\}(?:</\w+>)*\s+(?:[a-z-]+\s+){0,2}?(?:" + NOUNS + r")\b")
# ${n} nouns, or n + ' nouns'
SCRIPT_COUNT = re.compile(r"(?:\$\{[^}]+\}|\w[\w.)\]]*\s*\+\s*['\"])\s+(?:[a-z-]+\s+){0,2}?(?:" + NOUNS + r")\b")
# What these print is not a count: a name, a state, a step number, a mean or a word such as "all".
NOT_COUNTS = {"kind_label|lower", "state", "step", "data.mean|floatformat:0", "numbers.diff_chars.mean|floatformat:0"}


@pytest.mark.parametrize(("n", "words"), [(0, "0 pairs"), (1, "1 pair"), (2, "2 pairs"), (1200, "1,200 pairs")])
def test_count_agrees_with_its_noun(n, words):
    assert count(n, "pair") == words


def test_count_takes_an_irregular_plural():
    assert (count(1, "copy", "copies"), count(3, "copy", "copies")) == ("1 copy", "3 copies")
    assert count(1, "preference pair") == "1 preference pair"


def test_the_template_scan_finds_a_bare_count():
    assert TEMPLATE_COUNT.search("Exported {{ n }} preference pairs")
    assert TEMPLATE_COUNT.search("<strong>{{ overview.jobs }}</strong> jobs")
    assert not TEMPLATE_COUNT.search("{{ n }} preference pair{{ n|pluralize }}")
    assert SCRIPT_COUNT.search("'Done: ' + run.sample_count + ' samples in '")
    assert SCRIPT_COUNT.search("`${c.included} rows (`")
    assert not SCRIPT_COUNT.search("wb.count(c.included, 'row')")


def test_templates_print_no_bare_count_before_a_plural_noun():
    found = []
    for path in sorted((ROOT / "templates").rglob("*.html")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            found += [f"{path.relative_to(ROOT)}:{number}: {m.group(0)}" for m in TEMPLATE_COUNT.finditer(line)
                      if m.group(1).strip() not in NOT_COUNTS and "pluralize" not in m.group(1)]
    assert found == [], "use {{ n }} noun{{ n|pluralize }}:\n" + "\n".join(found)


def test_scripts_print_no_bare_count_before_a_plural_noun():
    found = []
    for path in sorted((ROOT / "webapp" / "static" / "js").glob("*.js")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            found += [f"{path.relative_to(ROOT)}:{number}: {m.group(0)}" for m in SCRIPT_COUNT.finditer(line)]
    assert found == [], "use wb.count(n, 'noun'):\n" + "\n".join(found)


@pytest.mark.parametrize("n", [1, 2])
def test_the_project_page_counts_in_words(as_user, admin_user, project, n):
    from webapp.datasets.models import Dataset

    for i in range(n):
        Dataset.objects.create(project=project, name=f"set-{i}", kind="prompts")
    page = as_user(admin_user).get(f"/p/{project.slug}/").content.decode()
    words = " ".join(re.sub(r"<[^>]+>", " ", page).split()) + " "
    assert ("1 dataset " if n == 1 else "2 datasets ") in words
    assert "1 member " in words  # the admin alone
    assert "0 jobs " in words
