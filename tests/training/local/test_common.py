"""Shared pieces: metrics lines, response masks, the resumable sampler, data reading."""
from __future__ import annotations

import json

import pytest
import torch

from training.local.common import MetricsLogger, clean_number, response_mask_from
from training.local.config import JobError
from training.local.data import EpochSampler, read_jsonl, render_prompt, render_response


def test_metrics_lines_use_verls_file_logger_format(tmp_path):
    log = MetricsLogger(tmp_path / "m.jsonl")
    log.log({"a": float("nan"), "b": torch.tensor(2.5), "c": float("inf"), "d": 3}, step=7)
    assert json.loads((tmp_path / "m.jsonl").read_text()) == {"step": 7, "data": {"a": None, "b": 2.5, "c": None,
                                                                                 "d": 3.0}}
    assert clean_number(None) is None


def test_response_mask_keeps_the_first_eos_and_drops_the_rest():
    resp = torch.tensor([[5, 6, 2, 0], [2, 0, 0, 0], [5, 5, 5, 5]])
    assert response_mask_from(resp, {2}).tolist() == [[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]]


def test_sampler_is_seeded_drops_the_last_partial_batch_and_resumes():
    a = EpochSampler(10, 4, seed=3)
    first = [a.next_batch() for _ in range(4)]  # 2 batches per epoch: 8 of 10 rows, then a new order
    assert len({tuple(b) for b in first}) == 4 and a.epoch == 1
    assert not set(first[0]) & set(first[1])  # one epoch never repeats a row
    b = EpochSampler(10, 4, seed=3)
    b.next_batch()
    c = EpochSampler(10, 4, seed=3)
    assert c.load_state_dict(b.state_dict())
    assert [c.next_batch() for _ in range(3)] == first[1:]
    assert not EpochSampler(11, 4, seed=3).load_state_dict(b.state_dict())  # data changed: start over
    with pytest.raises(JobError, match="larger than the 3 training rows"):
        EpochSampler(3, 4, seed=0)


def test_bad_jsonl_names_the_line(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text('{"prompt": "a"}\n{oops\n')
    with pytest.raises(JobError, match="train.jsonl line 2 is not valid JSON"):
        read_jsonl(path)


def test_chat_prompts_without_a_template_render_as_plain_roles():
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]
    assert render_prompt(msgs) == "system: Be brief.\nuser: 2+2?\nassistant: "
    assert render_response([{"role": "assistant", "content": "4"}]) == "4"
    with pytest.raises(JobError):
        render_prompt(42)


def test_threads_follow_the_idle_cores_for_a_real_model(monkeypatch):
    from training.local import common

    monkeypatch.delenv("RLHF_TORCH_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(common.os, "sched_getaffinity", lambda _pid: {0, 1, 2, 3})
    loads = {"quiet": (0.3, 0, 0), "half": (2.2, 0, 0), "busy": (25.0, 0, 0)}
    got = {}
    for name, load in loads.items():
        monkeypatch.setattr(common.os, "getloadavg", lambda load=load: load)
        got[name] = common.free_cores()
    assert got == {"quiet": 4, "half": 2, "busy": 1}
    before = torch.get_num_threads()
    try:
        big = torch.nn.Linear(2500, 2500)  # 6.25M parameters: above the tiny-model line
        common.set_threads(big)
        assert torch.get_num_threads() == 1  # load 25 on 4 cores
        monkeypatch.setattr(common.os, "getloadavg", lambda: (0.3, 0, 0))
        common.set_threads(big)
        assert torch.get_num_threads() == 4
        monkeypatch.setenv("RLHF_TORCH_THREADS", "3")
        common.set_threads(big)
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)


def test_log_probs_run_the_lm_head_on_the_response_positions_only(tmp_path):
    from training import demo
    from training.local.common import position_ids, token_logprobs
    from training.models import load_model_and_tokenizer

    model, _ = load_model_and_tokenizer(demo.build_demo_model(tmp_path / "m"))
    ids = torch.randint(3, model.config.vocab_size, (3, 9))
    attn = torch.ones_like(ids)
    attn[0, :2] = 0  # a left-padded row
    seen = []
    model.lm_head.register_forward_hook(lambda _m, inp, _out: seen.append(inp[0].shape[1]))
    logp, ent = token_logprobs(model, ids, attn, 4, temperature=0.7, with_entropy=True)
    assert seen == [5]  # 4 response positions + the one before them, not all 9
    with torch.no_grad():
        full = model(input_ids=ids, attention_mask=attn, position_ids=position_ids(attn)).logits
    want = torch.log_softmax(full[:, -5:-1].float() / 0.7, -1)
    assert torch.allclose(logp, want.gather(-1, ids[:, -4:, None]).squeeze(-1), atol=1e-5)
    assert torch.allclose(ent, -(want.exp() * want).sum(-1), atol=1e-5)


def test_the_entropy_stays_out_of_the_graph_without_an_entropy_bonus(tmp_path):
    from training import demo
    from training.local.common import token_logprobs
    from training.models import load_model_and_tokenizer

    model, _ = load_model_and_tokenizer(demo.build_demo_model(tmp_path / "m"))
    ids = torch.randint(3, model.config.vocab_size, (2, 7))
    attn = torch.ones_like(ids)
    logp, ent = token_logprobs(model, ids, attn, 3, with_entropy=True, entropy_grad=False)
    assert logp.requires_grad and not ent.requires_grad  # metrics only: nothing kept for the backward pass
    logp2, ent2 = token_logprobs(model, ids, attn, 3, with_entropy=True)
    assert ent2.requires_grad and torch.allclose(ent, ent2.detach())


def _grouped_rows(model, prompts: int, group: int, plen: int, rlen: int):
    """GRPO's layout: each left-padded prompt repeated for its group's rows, then a response per row (some
    ending early, their mask 0 after the end)."""
    prompt = torch.randint(3, model.config.vocab_size, (prompts, plen))
    pmask = torch.ones_like(prompt)
    pmask[0, :3] = 0  # a left-padded prompt
    ids = torch.cat([prompt.repeat_interleave(group, 0), torch.randint(3, model.config.vocab_size,
                                                                       (prompts * group, rlen))], 1)
    rmask = torch.ones(prompts * group, rlen, dtype=torch.long)
    rmask[1, rlen // 2:] = 0  # a response that ended early
    return ids, torch.cat([pmask.repeat_interleave(group, 0), rmask], 1)


def test_a_groups_prompt_runs_once_with_the_same_log_probs_and_gradients(tmp_path):
    from training import demo
    from training.local.common import token_logprobs
    from training.models import load_model_and_tokenizer

    model, _ = load_model_and_tokenizer(demo.build_demo_model(tmp_path / "m"))
    model.train()
    torch.manual_seed(0)  # the same rows whichever tests ran before in this process
    ids, attn = _grouped_rows(model, prompts=3, group=4, plen=8, rlen=5)
    rows_seen = []
    hook = model.model.embed_tokens.register_forward_hook(lambda _m, inp, _out: rows_seen.append(tuple(inp[0].shape)))
    results = {}
    for group in (1, 4):
        model.zero_grad()
        rows_seen.clear()
        logp, ent = token_logprobs(model, ids, attn, 5, temperature=0.7, with_entropy=True, group=group)
        (logp * attn[:, -5:]).sum().backward()
        grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        results[group] = (logp.detach(), ent.detach(), grads, list(rows_seen))
    hook.remove()
    assert results[1][3] == [(12, 13)]  # every row runs its prompt
    assert results[4][3] == [(3, 8), (12, 4)]  # each prompt once, then the responses (the last token predicts nothing)
    for plain, shared in zip(results[1][:2], results[4][:2], strict=True):
        assert torch.allclose(plain, shared, atol=1e-5)
    # Gradients are sums over every token: float32 rounding grows with them (entries up to ~600 here, the two
    # passes differing by up to 2e-6 of the largest over 40 draws of the rows), so the bound is relative to it.
    plain_grads, shared_grads = results[1][2], results[4][2]
    assert torch.allclose(plain_grads, shared_grads, rtol=1e-5, atol=1e-5 * plain_grads.abs().max().item())
    assert plain_grads.abs().sum() > 0


def test_rows_that_are_not_groups_of_one_prompt_run_whole(tmp_path):
    from training import demo
    from training.local.common import token_logprobs
    from training.models import load_model_and_tokenizer

    model, _ = load_model_and_tokenizer(demo.build_demo_model(tmp_path / "m"))
    ids, attn = _grouped_rows(model, prompts=2, group=2, plen=6, rlen=3)
    ids[1, 4] = (ids[1, 4] + 1) % model.config.vocab_size  # the second row's prompt differs from its group's first
    rows_seen = []
    model.model.embed_tokens.register_forward_hook(lambda _m, inp, _out: rows_seen.append(tuple(inp[0].shape)))
    with torch.no_grad():
        plain = token_logprobs(model, ids, attn, 3)[0]
        assert rows_seen == [(4, 9)]
        assert torch.equal(token_logprobs(model, ids, attn, 3, group=2)[0], plain)  # the plain pass again
        assert rows_seen == [(4, 9), (4, 9)]
        assert token_logprobs(model, ids[:3], attn[:3], 3, group=2)[0].shape == (3, 3)  # 3 rows: not whole groups


def test_generation_runs_each_prompt_once_for_its_group_with_the_same_tokens(tmp_path):
    from training import demo
    from training.local.common import rollout
    from training.models import load_model_and_tokenizer

    model, tok = load_model_and_tokenizer(demo.build_demo_model(tmp_path / "m"))
    prompts = ["1+2=", "12+30=", "7+8="]
    rows_seen = []
    model.model.embed_tokens.register_forward_hook(lambda _m, inp, _out: rows_seen.append(tuple(inp[0].shape)))
    grouped = rollout(model, tok, prompts, 3, 4, greedy=True, record_logprobs=True)
    width = grouped.prompt_len
    assert rows_seen[0] == (3, width - 1) and rows_seen[1] == (9, 1)  # each prompt once, then the group's rows
    rows_seen.clear()
    each = rollout(model, tok, [p for p in prompts for _ in range(3)], 1, 4, greedy=True, record_logprobs=True)
    assert rows_seen[0] == (9, width)  # one sample a prompt: nothing to share
    assert torch.equal(grouped.input_ids, each.input_ids) and grouped.texts == each.texts
    assert torch.allclose(grouped.logprobs, each.logprobs, atol=1e-5)
