"""Per-token numbers the sample browser colours a response by, besides the KL log-ratio: the log-prob the
rollout gave each token it sampled (to compare with the training pass's), and VERL's train-vs-rollout
probability metrics computed the same way on the local backend.

The rollout's log-probs come from `generate` itself: a logits processor keeps the step's log-softmax and,
at the next step, takes the log-prob of the token that was chosen (one (N, vocab) tensor alive at a time).
"""
from __future__ import annotations

import torch

# VERL's names (verl/utils/debug/metrics.py `calculate_debug_metrics`): |p_train - p_rollout| over response tokens.
DIFF_MAX, DIFF_MEAN, DIFF_STD = ("training/rollout_probs_diff_max", "training/rollout_probs_diff_mean",
                                 "training/rollout_probs_diff_std")


class ChosenLogprobs:
    """A `generate` logits processor that records the sampling distribution's log-prob of each chosen token.

    Custom processors run before the temperature warper, so the logits are divided by `temperature` here,
    as the rollout samples them and as the trainer's `token_logprobs` computes them."""

    def __init__(self, temperature: float = 1.0) -> None:
        self.temperature = temperature or 1.0
        self._last: torch.Tensor | None = None
        self._chosen: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self._last is not None:  # input_ids now end with the token sampled from the previous step's scores
            self._chosen.append(self._last.gather(-1, input_ids[:, -1:]).squeeze(-1))
        self._last = torch.log_softmax(scores.float() / self.temperature, dim=-1)
        return scores

    def finish(self, sequences: torch.Tensor, response_len: int) -> torch.Tensor:
        """(N, response_len) log-probs of the sampled response tokens (the last step's taken from `sequences`)."""
        if self._last is not None and len(self._chosen) < response_len:
            self._chosen.append(self._last.gather(-1, sequences[:, -1:]).squeeze(-1))
        self._last = None
        if not self._chosen:
            return torch.zeros(sequences.shape[0], 0)
        return torch.stack(self._chosen[:response_len], dim=1)


def probs_diff_metrics(train_logp: torch.Tensor, rollout_logp: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """VERL's `training/rollout_probs_diff_{max,mean,std}`: |exp(train) - exp(rollout)| over the response tokens."""
    diff = (train_logp.detach().float().exp() - rollout_logp.detach().float().exp()).abs()
    values = diff[mask > 0]
    if values.numel() == 0:
        return {}
    return {DIFF_MAX: float(values.max()), DIFF_MEAN: float(values.mean()),
            DIFF_STD: float(values.std()) if values.numel() > 1 else 0.0}
