"""The caller's side of the batch protocol: columns out, result chunks back (no process here)."""
from __future__ import annotations

import pytest

from training.sandbox import ScoreResult
from training.sandbox.protocol import KeyCheck, columns, decode_chunk, pieces


def _decode(msg: dict, nxt: int = 0, stop: int = 10) -> list[ScoreResult] | None:
    return decode_chunk(msg, nxt, stop, KeyCheck(), 5000.0)


def test_a_plain_chunk_decodes_to_results_equal_to_score_results():
    out = _decode({"i0": 3, "s": [1.0, 0.0], "dt": 0.002}, nxt=3)
    assert out == [ScoreResult(3, 1.0, duration_ms=1.0), ScoreResult(4, 0.0, duration_ms=1.0)]
    assert [r.to_dict() for r in out] == [ScoreResult(3, 1.0, duration_ms=1.0).to_dict(),
                                          ScoreResult(4, 0.0, duration_ms=1.0).to_dict()]
    assert all(isinstance(r, ScoreResult) and r.ok for r in out)
    out[0].extra["note"] = 1  # extra is a real, mutable dict
    out[1].extra = {"k": 2}
    assert (out[0].extra, out[1].extra) == ({"note": 1}, {"k": 2})


def test_errors_and_slow_calls_take_the_slow_path():
    msg = {"i0": 0, "s": [None, 0.5], "dt": 0.003, "slow": [[0, 0.002]], "e": [[0, "ValueError: x", "tb", 4]]}
    bad, good = _decode(msg)
    assert (bad.score, bad.error, bad.traceback, bad.lineno, bad.duration_ms) == (None, "ValueError: x", "tb", 4, 2.0)
    assert (good.score, good.error, good.duration_ms) == (0.5, None, pytest.approx(1.0))


@pytest.mark.parametrize("msg", [
    {"i0": 0, "s": [1.0, "1.0"], "dt": 0.0},  # not a number
    {"i0": 0, "s": [1.0, 1], "dt": 0.0},  # an int is not what the child sends
    {"i0": 0, "s": [1.0, None], "dt": 0.0},  # no score and no error
    {"i0": 1, "s": [1.0], "dt": 0.0},  # out of order
    {"i0": 0, "s": [1.0] * 11, "dt": 0.0},  # more than the batch holds
    {"i0": 0, "s": [1.0], "dt": 0.0, "e": [[5, "x", None, None]]},  # an error for a sample not in the chunk
])
def test_malformed_chunks_are_rejected(msg):
    assert _decode(msg) is None


def test_columns_transpose_the_items_and_drop_an_all_none_extra_info():
    items = [{"data_source": "d", "solution_str": f"s{i}", "ground_truth": "g", "extra_info": None} for i in range(3)]
    cols = columns(items)
    assert (list(cols["ds"]), list(cols["sol"]), list(cols["gt"]), cols["ex"]) == (["d"] * 3, ["s0", "s1", "s2"],
                                                                                   ["g"] * 3, None)
    assert columns([]) == {"ds": [], "sol": [], "gt": [], "ex": None}
    partial = columns(iter([{"solution_str": "a", "extra_info": {"k": 1}}]))
    assert (list(partial["ds"]), list(partial["ex"])) == ([None], [{"k": 1}])
    with pytest.raises(TypeError, match="item 1 is a str"):
        columns([items[0], "oops"])


def test_pieces_cover_the_range_in_order_with_a_small_first_one():
    parts = pieces(5, 1005)
    assert parts[0][0] == 5 and parts[-1][1] == 1005
    assert all(a == b for (_, a), (b, _) in zip(parts, parts[1:]))
    assert parts[0][1] - parts[0][0] <= parts[1][1] - parts[1][0]
    assert pieces(7, 7) == [(7, 7)]
