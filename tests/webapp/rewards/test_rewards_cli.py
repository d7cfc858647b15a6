"""`manage.py reward_check`: JSON results of a reward file on a dataset or responses."""
from __future__ import annotations

import json

import pytest
from django.core.management import CommandError, call_command

pytestmark = pytest.mark.django_db


def run(*args) -> dict:
    from io import StringIO

    out = StringIO()
    call_command("reward_check", *args, stdout=out)
    return json.loads(out.getvalue())


def test_reward_check_on_a_dataset(tmp_path, arith, exact_source):
    f = tmp_path / "reward.py"
    f.write_text(exact_source)
    out = run(str(f), "--dataset", "arith", "--project", "acme", "--limit", "2")
    assert out["ok"] and out["mode"] == "reference" and [r["score"] for r in out["results"]] == [1.0, 1.0]
    assert out["summary"]["all"]["n"] == 2 and out["isolation"] in ("bubblewrap", "rlimits")
    assert sorted(s["i"] for s in out["summary"]["slowest"]) == [0, 1]  # each sample's own time, slowest first
    assert out["summary"]["slowest"][0]["duration_ms"] >= out["summary"]["slowest"][1]["duration_ms"] > 0


def test_reward_check_with_a_responses_file(tmp_path, arith, exact_source):
    f = tmp_path / "reward.py"
    f.write_text(exact_source)
    responses = tmp_path / "responses.txt"
    responses.write_text("3\n5\n")
    out = run(str(f), "--dataset", "arith@1", "--responses", str(responses))
    assert [r["score"] for r in out["results"]] == [1.0, 0.0] and out["mode"] == "responses"


def test_reward_check_reports_a_failing_sample(tmp_path, arith):
    f = tmp_path / "reward.py"
    f.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kw):\n"
                 "    return int(solution_str)\n")
    responses = tmp_path / "r.json"
    responses.write_text('["4", "x"]')
    out = run(str(f), "--responses", str(responses))
    assert out["results"][0]["score"] == 4.0 and out["results"][1]["lineno"] == 2


@pytest.mark.parametrize("args, message", [
    (["missing.py", "--dataset", "arith"], "Cannot read"),
    (["{f}", "--dataset", "nope"], "No dataset version 'nope'"),
    (["{f}", "--dataset", "arith", "--project", "zzz"], "No project"),
    (["{f}"], "--dataset"),
    (["{bad}", "--dataset", "arith"], "Line 1"),
])
def test_reward_check_errors_are_clear(tmp_path, arith, exact_source, args, message):
    f = tmp_path / "reward.py"
    f.write_text(exact_source)
    bad = tmp_path / "bad.py"
    bad.write_text("def compute_score(:\n")
    args = [a.format(f=f, bad=bad) for a in args]
    with pytest.raises(CommandError, match=message):
        run(*args)


def test_reward_check_exits_with_an_error_when_the_reward_cannot_load(tmp_path, arith):
    f = tmp_path / "reward.py"
    f.write_text("raise SystemExit('nope')\ndef compute_score(data_source, solution_str, ground_truth, "
                 "extra_info=None, **kw):\n    return 1.0\n")
    with pytest.raises(CommandError, match="could not be loaded"):
        run(str(f), "--dataset", "arith")
