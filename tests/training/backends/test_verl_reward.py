"""The reward wrapper VERL imports: same scores as the sandbox, batching, mixing, fixed keys."""
from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from training.backends import verl_reward
from training.backends.verl import VerlBackend
from training.backends.verl_reward import MicroBatcher, make_compute_score


class FakeSandbox:
    """In-process stand-in for SandboxPool that records how it is called (unit tests only)."""

    batches: list[int] = []
    sizes: list[int] = []
    active = 0
    max_active = 0
    lock = threading.Lock()

    def __init__(self, source, name="compute_score", limits=None, size=1):
        type(self).sizes.append(size)
        ns: dict = {}
        exec(compile(source, "<reward>", "exec"), ns)  # noqa: S102 - test double, trusted test source
        self.fn = ns[name]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def score_batch(self, items):
        cls = type(self)
        with cls.lock:
            cls.active += 1
            cls.max_active = max(cls.max_active, cls.active)
            cls.batches.append(len(items))
        time.sleep(0.005)
        out = []
        for it in items:
            try:
                val = self.fn(**it)
                score = float(val["score"] if isinstance(val, dict) else val)
                extra = {k: v for k, v in val.items() if k != "score"} if isinstance(val, dict) else {}
                out.append(type("R", (), {"score": score, "extra": extra, "error": None}))
            except Exception as exc:  # noqa: BLE001
                out.append(type("R", (), {"score": None, "extra": {}, "error": f"{type(exc).__name__}: {exc}"}))
        with cls.lock:
            cls.active -= 1
        return out


@pytest.fixture
def fake_sandbox(monkeypatch):
    import training.sandbox

    FakeSandbox.batches, FakeSandbox.sizes, FakeSandbox.active, FakeSandbox.max_active = [], [], 0, 0
    monkeypatch.setattr(training.sandbox, "SandboxPool", FakeSandbox)
    return FakeSandbox


def _prepared(make_run, updates=None) -> tuple[Path, dict]:
    spec, run_dir = make_run(updates)
    VerlBackend().prepare(run_dir, 1)
    return run_dir, json.loads((run_dir / "verl" / "reward.json").read_text())


def _load_like_verl(run_dir: Path):
    from verl.utils.import_utils import load_extern_object

    return load_extern_object(str(run_dir / "verl" / "reward_fn.py"), "compute_score")


def _sample(i: int, split: str = "train", response: str | None = None) -> dict:
    gt = str(i % 7)
    return {"data_source": "arith", "solution_str": response if response is not None else (gt if i % 2 else "x"),
            "ground_truth": gt, "extra_info": {"split": split, "index": i, "reference": gt}}


def test_micro_batcher_gathers_threads_into_batches_and_keeps_order():
    seen: list[int] = []
    # the first batch is held until every thread has submitted, so the rest wait together however slowly
    # the threads start on a busy machine
    submitted, lock, all_in = [0], threading.Lock(), threading.Event()

    def fn(items):
        seen.append(len(items))
        all_in.wait(timeout=120)
        return [x * 10 for x in items]

    batcher = MicroBatcher(fn, window_s=0.02, max_batch=8)
    results: dict[int, int] = {}

    def call(i):
        fut = batcher.submit(i)
        with lock:
            submitted[0] += 1
            if submitted[0] == 40:
                all_in.set()
        results[i] = fut.result(timeout=120)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {i: i * 10 for i in range(40)}
    assert sum(seen) == 40 and max(seen) <= 8 and len(seen) < 40


def test_micro_batcher_hands_a_scorer_crash_to_every_caller():
    batcher = MicroBatcher(lambda items: 1 / 0, window_s=0.001)
    with pytest.raises(ZeroDivisionError):
        batcher.submit("x").result(timeout=120)


def test_wrapper_batches_concurrent_calls_and_never_shares_the_sandbox(make_run, fake_sandbox):
    run_dir, _ = _prepared(make_run)
    compute_score = _load_like_verl(run_dir)
    samples = [_sample(i) for i in range(48)]
    out: list = [None] * len(samples)

    def call(i):
        out[i] = compute_score(**samples[i])

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(samples))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [o["score"] for o in out] == [float(s["solution_str"] == s["ground_truth"]) for s in samples]
    assert fake_sandbox.max_active == 1  # one thread at a time inside the sandbox
    assert len(fake_sandbox.batches) < len(samples) + 1  # +1: the key probe


@pytest.mark.parametrize("budget,loop_workers,pool", [(None, 4, None), (16, 4, 4), (6, 4, 1), (2, 2, 1)])
def test_the_jobs_reward_workers_are_shared_out_over_verls_reward_workers(make_run, fake_sandbox, budget,
                                                                          loop_workers, pool):
    from training.backends.verl_overrides import VerlJob
    from training.sandbox import pool_size

    run_dir, cfg = _prepared(make_run, {"hp": {"reward_workers": budget}})
    job = VerlJob.from_spec(json.loads((run_dir / "job.json").read_text()))
    assert job.reward.loop_workers == loop_workers  # reward.num_workers
    assert (cfg["reward_workers"], cfg["loop_workers"]) == (budget, loop_workers)
    fn = make_compute_score(str(run_dir / "verl" / "reward.json"))
    assert fn(**_sample(3))["score"] == 1.0
    expected = pool if pool is not None else pool_size(None, share=4)  # min(CPUs, 4) // 4, at least 1
    assert fake_sandbox.sizes == [expected]  # one pool for the one function component, of this size


def test_every_sample_returns_the_same_keys_even_after_a_user_error(make_run, fake_sandbox):
    reward = {"shaping": "raw", "components": [{"type": "function", "path": "reward/length_penalty.py", "weight": 1.0}]}
    run_dir, _ = _prepared(make_run, {"reward": reward})
    compute_score = _load_like_verl(run_dir)
    ok = compute_score(**_sample(1, response="abcd"))
    bad = compute_score(**_sample(2, response="boom"))
    assert ok["score"] == pytest.approx(-0.4) and ok["reward_error"] == 0.0
    assert bad["score"] == 0.0 and bad["reward_error"] == 1.0
    assert set(ok) == set(bad)


def test_user_extras_are_forwarded_under_a_fixed_key_set(make_run, fake_sandbox):
    run_dir, _ = _prepared(make_run)
    out = _load_like_verl(run_dir)(**_sample(3, response="3"))
    assert out["exact"] == 1.0 and out["length"] == 1.0 and out["acc"] == 1.0


def test_validation_rows_get_a_reference_score_and_a_win(make_run, fake_sandbox):
    run_dir, cfg = _prepared(make_run)
    assert cfg["score_references"] is True  # every val row of the fixture has a reference
    compute_score = _load_like_verl(run_dir)
    win = compute_score(**{**_sample(5, "val", response="5"), "ground_truth": "5"})
    loss = compute_score(**{**_sample(5, "val", response="nope"), "ground_truth": "5"})
    train = compute_score(**_sample(5, "train", response="5"))
    assert (win["reference_score"], win["win"]) == (1.0, 0.5)  # tie with a correct reference
    assert loss["win"] == 0.0
    assert math.isnan(train["win"]) and set(train) == set(win)


class _RewardModelServer(BaseHTTPRequestHandler):
    """vLLM's /classify shape: the score is the text length / 100."""

    def do_POST(self):  # noqa: N802 - http.server API
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        assert self.path == "/classify" and body["use_activation"] is False
        payload = json.dumps({"data": [{"probs": [len(body["input"]) / 100]}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        return


def test_function_and_model_components_are_mixed_by_weight(make_run, fake_sandbox, tmp_path, tiny_model_dir):
    from training.models import build_tiny_reward_model, load_tokenizer

    rm = build_tiny_reward_model(tmp_path / "rm", hidden=32, layers=1)
    reward = {"shaping": "normalized", "components": [
        {"type": "function", "path": "reward/exact_match.py", "weight": 1.0},
        {"type": "model", "path": str(rm), "weight": 0.5}]}
    run_dir, _ = _prepared(make_run, {"reward": reward})
    server = ThreadingHTTPServer(("127.0.0.1", 0), _RewardModelServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        tok = load_tokenizer(tiny_model_dir)
        extra = json.loads(json.dumps(_sample(4)["extra_info"]))
        extra["prompt_messages"] = json.dumps([{"role": "user", "content": "3+1="}])
        out = _load_like_verl(run_dir)(data_source="arith", solution_str="4", ground_truth="4", extra_info=extra,
                                      reward_router_address=f"127.0.0.1:{server.server_port}",
                                      reward_model_tokenizer=tok)
    finally:
        server.shutdown()
    rm_text = tok.apply_chat_template([{"role": "user", "content": "3+1="}, {"role": "assistant", "content": "4"}],
                                      tokenize=False)
    expected_rm = len(rm_text) / 100
    assert out["r/reward_model"] == pytest.approx(expected_rm)
    assert out["score"] == pytest.approx(math.tanh(1.0 * 1.0 + 0.5 * expected_rm))


def test_parquet_carries_the_prompt_for_reward_models_only(make_run, tmp_path):
    import pyarrow.parquet as pq

    from training.models import build_tiny_reward_model

    plain, _ = _prepared(make_run)
    assert "prompt_messages" not in pq.read_table(plain / "data/train.parquet").to_pylist()[0]["extra_info"]
    rm = build_tiny_reward_model(tmp_path / "rm2", hidden=32, layers=1)
    with_rm, _ = _prepared(lambda u: make_run(u, name="rm"), {"reward": {"components": [
        {"type": "model", "path": str(rm), "weight": 1.0}]}})
    row = pq.read_table(with_rm / "data/train.parquet").to_pylist()[0]
    assert json.loads(row["extra_info"]["prompt_messages"]) == row["prompt"]


def test_batch_entry_point_matches_the_per_sample_one(make_run, fake_sandbox):
    run_dir, _ = _prepared(make_run)
    fn = make_compute_score(str(run_dir / "verl" / "reward.json"))
    samples = [_sample(i) for i in range(6)]
    batch = fn.batch([s["data_source"] for s in samples], [s["solution_str"] for s in samples],
                     [s["ground_truth"] for s in samples], [s["extra_info"] for s in samples])
    assert [b["score"] for b in batch] == [fn(**s)["score"] for s in samples]


# -- with the real sandbox -------------------------------------------------------------------

def _sandbox_or_skip():
    sandbox = pytest.importorskip("training.sandbox", reason="training.sandbox is not in this checkout yet")
    return sandbox.RewardSandbox, sandbox.SandboxLimits


def test_wrapper_loaded_by_verl_scores_like_the_sandbox(make_run, verl_compose):
    RewardSandbox, SandboxLimits = _sandbox_or_skip()
    from verl.trainer.ppo.reward import load_reward_manager

    from training.models import load_tokenizer

    spec, run_dir = make_run()
    plan = VerlBackend().prepare(run_dir, 1)
    cfg = verl_compose(plan.argv[3:])
    tok = load_tokenizer(spec["model"]["path"])
    manager = load_reward_manager(cfg, tok)  # verl's own loader: get_custom_reward_fn + the naive manager
    samples = [_sample(i, "val" if i % 3 == 0 else "train") for i in range(12)]
    data = _data_proto(tok, samples)
    loop = manager.loop
    outs = loop.run_until_complete(asyncio.gather(*(manager.run_single(data[i:i + 1]) for i in range(len(samples)))))
    with RewardSandbox((run_dir / "reward" / "exact_match.py").read_text(), name="compute_score",
                       limits=SandboxLimits.from_dict(spec["sandbox"])) as sb:
        direct = sb.score_batch(samples)
    assert [o["reward_score"] for o in outs] == [r.score for r in direct]
    assert all(r.error is None for r in direct)
    keys = {frozenset(o["reward_extra_info"]) for o in outs}
    assert len(keys) == 1  # VERL builds its columns from the first sample's keys


def _data_proto(tok, samples):
    """The DataProto slice the naive reward manager receives: prompt + response ids and metadata."""
    import torch
    from verl import DataProto

    width = 8
    responses, masks = [], []
    for s in samples:
        ids = tok(s["solution_str"], add_special_tokens=False)["input_ids"][:width]
        responses.append(ids + [tok.pad_token_id] * (width - len(ids)))
        masks.append([1, 1] + [1] * len(ids) + [0] * (width - len(ids)))  # 2 prompt tokens, then the response
    return DataProto.from_dict(
        tensors={"responses": torch.tensor(responses), "attention_mask": torch.tensor(masks),
                 "prompts": torch.zeros(len(samples), 2, dtype=torch.long)},
        non_tensors={"data_source": np.array([s["data_source"] for s in samples], dtype=object),
                     "reward_model": np.array([{"ground_truth": s["ground_truth"], "style": "rule"}
                                               for s in samples], dtype=object),
                     "extra_info": np.array([dict(s["extra_info"]) for s in samples], dtype=object)})


def test_runners_are_per_process_and_closed_at_exit(make_run, fake_sandbox):
    run_dir, _ = _prepared(make_run)
    path = str(run_dir / "verl" / "reward.json")
    assert verl_reward.get_runner(path) is verl_reward.get_runner(path)


def test_a_reference_that_fails_to_score_gives_no_win(make_run, fake_sandbox):
    reward = {"shaping": "raw", "components": [{"type": "function", "path": "reward/length_penalty.py", "weight": 1.0}]}
    run_dir, _ = _prepared(make_run, {"reward": reward})
    sample = _sample(2, "val", response="ab")
    sample["extra_info"]["reference"] = "boom"  # the user's function raises on this text
    out = _load_like_verl(run_dir)(**sample)
    assert out["score"] == pytest.approx(-0.2)
    assert math.isnan(out["reference_score"]) and math.isnan(out["win"])
