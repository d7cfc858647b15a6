"""The caller's side of the batch protocol: columns out, result chunks back (no process here)."""
from __future__ import annotations

import pytest

from training.sandbox import ScoreBatch, ScoreResult
from training.sandbox.protocol import KeyCheck, columns, decode_chunk, failed, pieces


def _decode(msg: dict, nxt: int = 0, stop: int = 10, keys: KeyCheck | None = None):
    return decode_chunk(msg, nxt, stop, keys or KeyCheck(), 5000.0)


def _batch(*chunks) -> ScoreBatch:
    out = ScoreBatch()
    for chunk in chunks:
        out.add(chunk)
    return out


def test_a_plain_chunk_stays_columns_and_builds_equal_score_results_on_demand():
    first = _decode({"i0": 0, "s": [1.0, 0.0], "t": [[2, 0.002]]})
    assert first == ([1.0, 0.0], [[2, 0.002]], {})  # no object per sample
    second = _decode({"i0": 2, "s": [0.5], "t": [[1, 0.003]]}, nxt=2)
    batch = _batch(first, second)
    assert batch.scores == [1.0, 0.0, 0.5] and batch.errors == {}
    assert batch.durations_ms == pytest.approx([1.0, 1.0, 3.0])  # a run's calls share its time
    assert list(batch) == [ScoreResult(0, 1.0, duration_ms=1.0), ScoreResult(1, 0.0, duration_ms=1.0),
                           ScoreResult(2, 0.5, duration_ms=3.0)]
    assert batch[-1] == batch[2] and batch[1:] == [batch[1], batch[2]]
    assert batch == list(batch) and len(batch) == 3
    with pytest.raises(IndexError):
        batch[3]
    res = batch[0]
    res.extra["note"] = 1  # extra is a real, mutable dict
    assert res.extra == {"note": 1} and res.ok


def test_errors_extras_and_late_calls_are_kept_whole():
    msg = {"i0": 0, "s": [None, 0.5, 0.25, 1.0], "t": [[1, 0.002], [2, 0.004], [1, 6.0]],
           "x": [None, {"acc": 1}, {"acc": 0}, {"acc": 1}], "e": [[0, "ValueError: x", "tb", 4]]}
    scores, runs, special = _decode(msg)
    assert scores == [None, 0.5, 0.25, None]
    batch = _batch((scores, runs, special))
    bad, good, other, late = batch
    assert (bad.score, bad.error, bad.traceback, bad.lineno, bad.duration_ms) == (None, "ValueError: x", "tb", 4, 2.0)
    assert (good.score, good.extra, good.duration_ms) == (0.5, {"acc": 1}, 2.0)
    assert other.extra == {"acc": 0}
    assert late.error == "timed out after 5 s (time_limit_s)"  # it ran 6 s: it swallowed its timeout
    assert batch.errors == {0: "ValueError: x", 3: "timed out after 5 s (time_limit_s)"}


def test_every_sample_must_return_the_same_keys_as_the_first():
    keys = KeyCheck()
    scores, _, special = _decode({"i0": 0, "s": [0.5, 1.0], "t": [[2, 0.0]], "x": [{"acc": 1}, None]}, keys=keys)
    assert scores == [0.5, None] and "returned a number, but sample 0" in special[1].error
    scores, _, special = _decode({"i0": 2, "s": [1.0], "t": [[1, 0.0]]}, nxt=2, keys=keys)
    assert scores == [None] and "every sample must return the same keys" in special[2].error


@pytest.mark.parametrize("msg", [
    {"i0": 0, "s": [1.0, "1.0"], "t": [[2, 0.0]]},  # not a number
    {"i0": 0, "s": [1.0, 1], "t": [[2, 0.0]]},  # an int is not what the child sends
    {"i0": 0, "s": [1.0, None], "t": [[2, 0.0]]},  # no score and no error
    {"i0": 1, "s": [1.0], "t": [[1, 0.0]]},  # out of order
    {"i0": 0, "s": [1.0] * 11, "t": [[11, 0.0]]},  # more than the batch holds
    {"i0": 0, "s": [1.0], "t": [[1, 0.0]], "e": [[5, "x", None, None]]},  # an error for a sample not in the chunk
    {"i0": 0, "s": [1.0, 1.0], "t": [[1, 0.0]]},  # runs that do not cover the chunk
    {"i0": 0, "s": [1.0], "t": [[1, -1.0]]},  # negative time
    {"i0": 0, "s": [1.0], "t": [[0, 0.0], [1, 0.0]]},  # an empty run
    {"i0": 0, "s": [1.0]},  # no runs at all
    {"i0": 0, "s": [1.0], "t": [[1, 0.0]], "x": [1]},  # an extra that is not a dict
])
def test_malformed_chunks_are_rejected(msg):
    assert _decode(msg) is None


def test_columns_transpose_the_items_and_send_repeated_values_once():
    items = [{"data_source": "d", "solution_str": f"s{i}", "ground_truth": "g", "extra_info": None} for i in range(3)]
    assert columns(items) == {"ds": "d", "sol": ["s0", "s1", "s2"], "gt": ["g"] * 3, "ex": None}
    assert columns([]) == {"ds": [], "sol": [], "gt": [], "ex": None}
    mixed = [dict(items[0]), dict(items[1], data_source="e", extra_info={"k": 1})]
    assert columns(mixed) == {"ds": ["d", "e"], "sol": ["s0", "s1"], "gt": ["g", "g"], "ex": [None, {"k": 1}]}
    non_str = [dict(items[0], data_source=1), dict(items[1], data_source=1.0)]  # equal, but not the same value
    assert columns(non_str)["ds"] == [1, 1.0]
    partial = columns([{"solution_str": "a", "extra_info": {"k": 1}}])
    assert (partial["ds"], partial["ex"]) == ([None], [{"k": 1}])
    with pytest.raises(TypeError, match="item 6 is a str"):
        columns([items[0], "oops"], first_index=5)


def test_pieces_cover_the_range_in_order_with_a_small_first_one():
    parts = pieces(5, 1005)
    assert parts[0][0] == 5 and parts[-1][1] == 1005
    assert all(a == b for (_, a), (b, _) in zip(parts, parts[1:], strict=False))
    assert parts[0][1] - parts[0][0] <= parts[1][1] - parts[1][0]
    assert pieces(7, 7) == [(7, 7)]


def test_failed_chunks_and_score_batch_equality():
    batch = _batch(failed(0, 2, "not scored"))
    assert batch.scores == [None, None] and batch.errors == {0: "not scored", 1: "not scored"}
    assert batch == [ScoreResult(0, None, error="not scored"), ScoreResult(1, None, error="not scored")]
    assert batch != [ScoreResult(0, None, error="not scored")]
    assert ScoreBatch() == [] and "0 samples" in repr(ScoreBatch())
