"""The CPU rollout server decodes a step's requests together: each request's answer is the one it gets alone."""
from __future__ import annotations

import pytest
import torch

from training.verl_cpu.batch_decode import Request, sample_batch


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from transformers import AutoModelForCausalLM

    from training.models import build_tiny_model

    path = build_tiny_model(tmp_path_factory.mktemp("tiny"), hidden=32, layers=2, max_positions=64)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager").eval()
    return model, model.config.vocab_size


PROMPTS = [[5, 6, 7], [8, 9, 10, 11, 12, 13, 14], [15], [16, 17, 18, 19]]


@pytest.mark.parametrize("params", [{"temperature": 0}, {"temperature": 1.0, "top_k": 20}])
def test_a_batch_gives_each_request_what_it_gets_alone(tiny, params):
    model, vocab = tiny
    reqs = [Request(p, max_tokens=6 + i, params={**params, "seed": 100 + i}) for i, p in enumerate(PROMPTS)]
    together = sample_batch(model, reqs, vocab, eos_ids=set())
    for req, (tokens, logps, stop) in zip(reqs, together, strict=True):
        alone_tokens, alone_logps, alone_stop = sample_batch(model, [req], vocab, eos_ids=set())[0]
        assert tokens == alone_tokens and stop == alone_stop == "length"
        assert len(tokens) == req.max_tokens  # each request keeps its own budget
        assert logps == pytest.approx(alone_logps, abs=1e-4)


def test_a_request_stops_at_its_own_eos_while_others_go_on(tiny):
    model, vocab = tiny
    free = sample_batch(model, [Request(PROMPTS[1], 8, {"temperature": 0})], vocab, eos_ids=set())[0][0]
    eos = free[2]  # the greedy third token of the second prompt becomes its EOS
    out = sample_batch(model, [Request(p, 8, {"temperature": 0}) for p in PROMPTS], vocab, eos_ids={eos})
    tokens, _, stop = out[1]
    assert stop == "completed" and tokens[-1] == eos and len(tokens) == free.index(eos) + 1
    assert all(len(t) == 8 or (s == "completed" and t[-1] == eos) for t, _, s in out)


def test_padded_embedding_rows_are_never_sampled(tiny):
    model, vocab = tiny
    out = sample_batch(model, [Request(p, 5, {"temperature": 1.0, "seed": 1}) for p in PROMPTS], vocab - 3, set())
    assert all(t < vocab - 3 for tokens, _, _ in out for t in tokens)


def test_a_groups_shared_prompt_is_run_once_and_each_sample_gets_what_it_gets_alone(tiny):
    """GRPO sends each prompt's samples as separate requests: the prompt pass runs once per distinct prompt."""
    model, vocab = tiny
    group = [PROMPTS[1], PROMPTS[3], PROMPTS[1], PROMPTS[3], PROMPTS[1], PROMPTS[0]]
    reqs = [Request(p, max_tokens=5, params={"temperature": 1.0, "seed": 7 + i}) for i, p in enumerate(group)]
    prompt_rows = []
    hook = model.register_forward_pre_hook(
        lambda _m, _a, kw: prompt_rows.append(kw["input_ids"].shape) if kw.get("past_key_values") is None else None,
        with_kwargs=True)
    try:
        together = sample_batch(model, reqs, vocab, eos_ids=set())
    finally:
        hook.remove()
    assert [rows for rows, _width in prompt_rows] == [3]  # one prompt pass, of the three distinct prompts
    for req, (tokens, logps, _stop) in zip(reqs, together, strict=True):
        alone_tokens, alone_logps, _ = sample_batch(model, [req], vocab, eos_ids=set())[0]
        assert tokens == alone_tokens
        assert logps == pytest.approx(alone_logps, abs=1e-4)
    assert together[0][0] != together[2][0]  # one prompt, own seeds: the samples differ
