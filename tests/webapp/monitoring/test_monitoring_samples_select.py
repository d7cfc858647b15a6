"""Sample browser reads (no database): a bounded index per step, filters, a prompt across steps, groups
with the tie flag, a word diff and the token colours."""
from __future__ import annotations

import json

import pytest

from tests.webapp.monitoring.sample_rows import PROMPTS, write_rollouts
from webapp.monitoring import sample_text
from webapp.monitoring import samples as sel


@pytest.fixture
def run(tmp_path):
    write_rollouts(tmp_path, [10, 20, 30, 40])
    sel._cache.clear()
    return str(tmp_path)


def test_the_index_keeps_numbers_not_texts_and_follows_file_changes(run, tmp_path):
    index = sel.step_index(run, "rollout", 20)
    assert len(index.entries) == 6 and len(index.by_prompt) == 3 and index.components == ["exact", "format"]
    assert not any(PROMPTS[1] in repr(e) or "answer" in repr(e) for e in index.entries)  # no text kept
    assert sel.step_index(run, "rollout", 20) is index  # cached
    path = tmp_path / "samples" / "rollout" / "20.jsonl"
    path.write_text(path.read_text().splitlines()[0] + "\n")
    assert len(sel.step_index(run, "rollout", 20).entries) == 1  # the file changed: re-read


def test_filters_by_component_score_length_truncation_and_errors(run):
    page = sel.step_page(run, "rollout", 20, sel.Filters(), 1)
    assert page["total"] == page["matched"] == 6 and page["prompts"] == 3 and page["tokens_logged"]
    def outputs(f):
        return [r["output"] for r in sel.step_page(run, "rollout", 20, f, 1)["rows"]]
    assert outputs(sel.Filters(truncated=True)) == ["6 6 6 6 6 6"]
    assert outputs(sel.Filters(errors=True)) == ["x"]
    assert outputs(sel.Filters(min_length=3)) == ["the answer is 20", "6 6 6 6 6 6"]
    assert outputs(sel.Filters(component="format", max_score=0.5)) == ["x"]
    # a score filter on a component skips the sample where that component raised
    assert "x" not in outputs(sel.Filters(component="exact", max_score=0.5))
    assert outputs(sel.Filters(min_score=1.0)) == ["2", "2", "4"]
    assert outputs(sel.Filters(prompt="2+2")) == ["the answer is 20", "4"]  # pick a prompt by its text
    assert outputs(sel.Filters(prompt="nothing like it")) == []


def test_pages_read_only_their_lines(run, monkeypatch):
    monkeypatch.setattr(sel, "PER_PAGE", 4)
    reads = []
    real = sel.ingest.read_sample_at
    monkeypatch.setattr(sel.ingest, "read_sample_at", lambda *a: reads.append(a) or real(*a))
    first = sel.step_page(run, "rollout", 20, sel.Filters(), 1)
    assert len(first["rows"]) == 4 and first["has_next"] and len(reads) == 4
    second = sel.step_page(run, "rollout", 20, sel.Filters(), 2)
    assert [r["output"] for r in second["rows"]] == ["6 6 6 6 6 6", "x"] and not second["has_next"]


def test_a_prompt_across_steps_is_capped_and_continues(run, monkeypatch):
    key = sel.prompt_key(PROMPTS[1])
    across = sel.prompt_columns(run, "rollout", key)
    assert [c["step"] for c in across["columns"]] == [10, 20, 30, 40] and across["prompt"] == PROMPTS[1]
    assert [s["output"] for s in across["columns"][1]["samples"]] == ["the answer is 20", "4"]
    assert not across["columns"][0]["tie"] and across["next_start"] is None
    only_even = sel.prompt_columns(run, "rollout", sel.prompt_key(PROMPTS[2]))
    assert [c["step"] for c in only_even["columns"]] == [20, 40]  # steps whose batch had the prompt
    monkeypatch.setattr(sel, "MAX_COLUMNS", 1)
    first = sel.prompt_columns(run, "rollout", key)
    assert [c["step"] for c in first["columns"]] == [10] and first["next_start"] == 1
    assert [c["step"] for c in sel.prompt_columns(run, "rollout", key, 1)["columns"]] == [20]
    monkeypatch.setattr(sel, "MAX_COLUMNS", 6)
    monkeypatch.setattr(sel, "SCAN_BUDGET", 2)  # reads at most two step files per request
    bounded = sel.prompt_columns(run, "rollout", sel.prompt_key(PROMPTS[2]))
    assert bounded["scanned"] == 2 and [c["step"] for c in bounded["columns"]] == [20] and bounded["next_start"] == 2


def test_group_flags_a_tie_and_shows_advantages(run):
    tied = sel.group(run, "rollout", 10, "10:0")
    assert tied["tie"] and tied["tie_score"] == 1.0 and [r["advantage"] for r in tied["rows"]] == [0.0, 0.0]
    mixed = sel.group(run, "rollout", 10, "10:1")
    assert not mixed["tie"] and [r["advantage"] for r in mixed["rows"]] == [-0.7071, 0.7071]
    assert sel.group(run, "rollout", 10, "nope") is None
    assert sel.is_tie([0.5, 0.5]) and not sel.is_tie([0.5]) and not sel.is_tie([0.5, None])


def test_verl_dump_rows_get_groups_and_advantages(tmp_path):
    folder = tmp_path / "samples" / "rollout"
    folder.mkdir(parents=True)
    rows = [{"input": "a", "output": "1", "score": 1.0, "step": 3}, {"input": "b", "output": "2", "score": 0.0},
            {"input": "a", "output": "3", "score": 0.0, "step": 3}, {"input": "b", "output": "4", "score": 0.0}]
    (folder / "3.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"input": "torn')
    sel._cache.clear()
    index = sel.step_index(str(tmp_path), "rollout", 3)
    assert len(index.entries) == 4 and len(index.by_uid) == 2
    b = sel.group(str(tmp_path), "rollout", 3, index.entries[1].uid)
    assert b["tie"] and [r["output"] for r in b["rows"]] == ["2", "4"]
    a = sel.group(str(tmp_path), "rollout", 3, index.entries[0].uid)
    assert a["rows"][0]["advantage"] > 0 > a["rows"][1]["advantage"] and a["rows"][0]["length"] is None


def test_validation_samples_are_one_per_prompt(tmp_path):
    folder = tmp_path / "samples" / "val"
    folder.mkdir(parents=True)
    for step, out in ((0, "3"), (5, "2")):
        (folder / f"{step}.jsonl").write_text(json.dumps({"input": "1+1=", "output": out, "gts": "2", "score": 1.0 * (
            out == "2"), "step": step, "reference": "5", "win": 1.0 * (out == "2"), "error": None}) + "\n")
    sel._cache.clear()
    across = sel.prompt_columns(str(tmp_path), "val", sel.prompt_key("1+1="))
    assert [(c["step"], c["samples"][0]["output"]) for c in across["columns"]] == [(0, "3"), (5, "2")]
    assert sel.sample_at(str(tmp_path), "val", 5, sel.prompt_key("1+1="))["win"] == 1.0


def test_word_diff_and_token_colours():
    segs = sample_text.word_diff("the answer is 4", "the answer: 4 indeed")
    assert "".join(t for op, t in segs if op != "ins") == "the answer is 4"
    assert "".join(t for op, t in segs if op != "del") == "the answer: 4 indeed"
    assert ("del", "is") in segs or any(op == "del" and "is" in t for op, t in segs)
    assert sample_text.diff_stats(segs)["ins"] >= 2
    col = sample_text.token_colours(["a", "b", "c"], [0.5, -1.0, None])
    assert col["scale"] == 1.0 and col["sum"] == -0.5 and col["top"][0]["text"] == "b"
    assert col["tokens"][0]["colour"].startswith("rgba(214,69,42") and col["tokens"][1]["colour"].startswith(
        "rgba(36,87,214") and col["tokens"][2]["colour"] == "transparent"
    assert "did not log them" in sample_text.token_colours(None, None)["reason"]
    assert "do not line up" in sample_text.token_colours(["a"], [0.1, 0.2])["reason"]


def test_token_views_by_advantage_entropy_and_train_rollout_difference():
    row = {"tokens": ["a", "b", "c"], "token_logratio": [0.1, -0.2, 0.0], "token_entropy": [0.5, 2.0, 1.0],
           "token_logprob_diff": [0.002, -0.05, 0.0], "advantage": -0.5}
    ent = sample_text.token_view(row, "entropy")
    assert [t["value"] for t in ent["tokens"]] == [0.5, 2.0, 1.0] and ent["scale"] == 2.0
    assert ent["tokens"][1]["colour"] == f"rgba({sample_text.ORANGE},0.85)"
    # GRPO: one advantage for the whole response, scaled to the largest of its group
    adv = sample_text.token_view(row, "advantage", group_max_advantage=1.0)
    assert adv["uniform"] and [t["value"] for t in adv["tokens"]] == [-0.5] * 3
    assert {t["colour"] for t in adv["tokens"]} == {f"rgba({sample_text.RED},0.42)"}
    per_token = sample_text.token_view({**row, "token_advantage": [1.0, -2.0, 0.5]}, "advantage")
    assert not per_token["uniform"] and per_token["tokens"][0]["colour"].startswith(f"rgba({sample_text.GREEN}")
    # rounding noise in the train-vs-rollout difference stays pale: at least 0.1 is full colour
    mis = sample_text.token_view(row, "mismatch")
    assert mis["scale"] == sample_text.MISMATCH_FLOOR and mis["tokens"][1]["colour"] == f"rgba({sample_text.BLUE},0.42)"
    assert sample_text.token_view(row, "kl") == sample_text.token_colours(row["tokens"], row["token_logratio"])
    # a VERL dump: no per-token numbers; the step's aggregate is named instead
    verl = {"output": "4", "advantage": 0.3}
    assert "did not log it" in sample_text.token_view(verl, "entropy")["reason"]
    said = sample_text.token_view(verl, "mismatch", step_mismatch={"mean": 0.0012, "max": 0.25})["reason"]
    assert "only for the whole step" in said and "mean 0.0012, max 0.25" in said
    assert "did not log them" in sample_text.token_view(verl, "mismatch")["reason"]
