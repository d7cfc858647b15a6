"""The transformers engine of training.generation: batched, left-padded, seeded per prompt.

HF `generate` samples every row from the one global torch RNG, so a row's tokens would depend on the
batch around it. Here `generate` runs greedy over logits that `RowSampler` has already sampled: each
prompt owns a torch.Generator seeded with `seed + i` (its n rows draw from it in turn), which keeps a
prompt's samples the same in any batch, and leaves the caller's global RNG untouched.
"""
from __future__ import annotations

import random
from collections.abc import Callable
from contextlib import nullcontext

import torch

from training.generation import Generation, GenerationError, Generator, check_request, render


class RowSampler:
    """A logits processor that samples each row (temperature, top-p) from its own generator."""

    def __init__(self, generators: list[torch.Generator], n: int, temperature: float, top_p: float) -> None:
        self.generators, self.n, self.temperature, self.top_p = generators, n, temperature, top_p

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        logits = scores.float() / self.temperature
        if self.top_p < 1.0:
            sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
            probs = torch.softmax(sorted_logits, dim=-1)
            drop = probs.cumsum(-1) - probs > self.top_p  # keeps the smallest set reaching top_p (at least one)
            logits = logits.scatter(-1, order, sorted_logits.masked_fill(drop, float("-inf")))
        probs = torch.softmax(logits, dim=-1)
        chosen = torch.stack([torch.multinomial(probs[r], 1, generator=self.generators[r // self.n])
                              for r in range(probs.shape[0])])
        out = torch.full_like(scores, float("-inf"))
        return out.scatter(-1, chosen, 0.0)


def eos_ids(model, tok) -> set[int]:
    ids = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    out = set(ids if isinstance(ids, list) else [ids] if ids is not None else [])
    if tok.eos_token_id is not None:
        out.add(tok.eos_token_id)
    return out


class TransformersGenerator(Generator):
    engine = "transformers"

    def __init__(self, model, tok, *, batch_size: int = 32, autocast: Callable | None = None) -> None:
        self.model, self.tok, self.batch_size, self.autocast = model, tok, max(1, int(batch_size)), autocast
        self.device = next(model.parameters()).device
        self.max_positions = getattr(getattr(model, "config", None), "max_position_embeddings", None)

    @torch.no_grad()
    def generate(self, prompts: list[str | list[dict]], *, n: int = 1, max_response_length: int = 128,
                 temperature: float = 1.0, top_p: float = 1.0, seed: int | None = None) -> list[list[Generation]]:
        check_request(prompts, n, max_response_length, temperature, top_p)
        texts = [render(p, self.tok) for p in prompts]
        base = int(seed) if seed is not None else random.SystemRandom().randrange(2**31)
        out: list[list[Generation]] = []
        was_training = self.model.training
        self.model.eval()
        try:
            for start in range(0, len(texts), self.batch_size):
                out.extend(self._batch(texts[start:start + self.batch_size], start, base, int(n),
                                       int(max_response_length), float(temperature), float(top_p)))
        finally:
            self.model.train(was_training)
        return out

    def _batch(self, texts: list[str], first: int, seed: int, n: int, max_response_length: int, temperature: float,
               top_p: float) -> list[list[Generation]]:
        enc = self.tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        # each prompt repeated n times (HF refuses num_return_sequences without sampling, which runs in RowSampler)
        ids = enc.input_ids.repeat_interleave(n, 0).to(self.device)
        mask = enc.attention_mask.repeat_interleave(n, 0).to(self.device)
        plen = ids.shape[1]
        budget = max_response_length
        if self.max_positions:  # never past the model's positions: the rest counts as truncated
            budget = min(budget, int(self.max_positions) - plen)
            if budget < 1:
                raise GenerationError(f"a prompt is {plen} tokens: the model reads at most {self.max_positions}")
        eos = eos_ids(self.model, self.tok)
        kwargs = {"max_new_tokens": budget, "pad_token_id": self.tok.pad_token_id, "eos_token_id": sorted(eos),
                  "do_sample": False, "temperature": None, "top_k": None, "top_p": None}
        if temperature > 0:
            gens = [torch.Generator(device=self.device).manual_seed(seed + first + i) for i in range(len(texts))]
            kwargs["logits_processor"] = [RowSampler(gens, n, temperature, top_p)]
        with self.autocast() if self.autocast else nullcontext():
            seqs = self.model.generate(input_ids=ids, attention_mask=mask, **kwargs)
        rows: list[Generation] = []
        for resp in seqs[:, plen:].tolist():
            stop = next((k for k, t in enumerate(resp) if t in eos), None)
            kept = resp if stop is None else resp[:stop]
            rows.append(Generation(text=self.tok.decode(kept, skip_special_tokens=True), token_ids=kept,
                                   finish_reason="length" if stop is None else "stop", truncated=stop is None))
        return [rows[i * n:(i + 1) * n] for i in range(len(texts))]

    def close(self) -> None:
        self.model = None
        super().close()
