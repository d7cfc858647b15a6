"""The rollout's own log-probs, recorded while `generate` samples, against a fresh forward pass."""
from __future__ import annotations

import pytest
import torch

from training.local.common import rollout, token_logprobs
from training.local.token_stats import DIFF_MAX, ChosenLogprobs, probs_diff_metrics
from training.models import load_model_and_tokenizer


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_recorded_logprobs_are_the_ones_the_sampler_used(demo_models, temperature):
    torch.manual_seed(0)
    model, tok = load_model_and_tokenizer(demo_models["policy"], torch.device("cpu"), torch.float32)
    ro = rollout(model, tok, ["1+2=", "12+30="], 3, 6, temperature=temperature, record_logprobs=True)
    assert ro.logprobs is not None and ro.logprobs.shape == ro.response_mask.shape
    with torch.no_grad():
        train, _ = token_logprobs(model, ro.input_ids, ro.attention_mask, ro.response_len, temperature)
    mask = ro.response_mask > 0
    assert torch.allclose(ro.logprobs[mask], train[mask], atol=1e-4)
    assert (ro.logprobs[mask] < 0).all()  # real log-probs of sampled tokens, not logits
    m = probs_diff_metrics(train, ro.logprobs, ro.response_mask)
    assert 0 <= m[DIFF_MAX] < 1e-4
    # a different temperature in the trainer is a real mismatch, and the metric shows it
    with torch.no_grad():
        other, _ = token_logprobs(model, ro.input_ids, ro.attention_mask, ro.response_len, temperature * 2)
    assert probs_diff_metrics(other, ro.logprobs, ro.response_mask)[DIFF_MAX] > 1e-2


def test_the_last_sampled_token_is_taken_from_the_sequences():
    rec = ChosenLogprobs()
    scores = torch.log(torch.tensor([[0.5, 0.25, 0.25]]))
    rec(torch.tensor([[9]]), scores)  # step 1 scores
    rec(torch.tensor([[9, 1]]), scores)  # token 1 was chosen at step 1
    out = rec.finish(torch.tensor([[9, 1, 0]]), response_len=2)  # token 0 at step 2
    assert out[0].tolist() == pytest.approx([torch.log(torch.tensor(0.25)).item(), torch.log(torch.tensor(0.5)).item()])
