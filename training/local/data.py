"""Data rows -> text, and a resumable epoch sampler."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from training import rundir
from training.local.config import JobError


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Read a JSONL file; a malformed line is reported with its number."""
    try:
        rows = rundir.read_jsonl(path, strict=True)
    except rundir.RunDirError as exc:
        raise JobError(str(exc)) from None
    if not rows:
        raise JobError(f"{path} has no rows")
    return rows


def render_prompt(prompt: Any, tokenizer=None) -> str:
    """The text a model is fed for a prompt, as VERL renders it: with a tokenizer that has a chat template,
    a chat list (a plain string being one user turn, as `training.parquet` writes it for VERL) through that
    template; without one, a string as it is and a chat list with plain role names."""
    if prompt is None:
        return ""
    templated = tokenizer is not None and bool(getattr(tokenizer, "chat_template", None))
    if isinstance(prompt, str):
        if not templated:
            return prompt
        prompt = [{"role": "user", "content": prompt}]
    if isinstance(prompt, list):
        if templated:
            return tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
        return "".join(f"{m.get('role', 'user')}: {m.get('content', '')}\n" for m in prompt) + "assistant: "
    raise JobError(f"prompt must be a string or a list of messages, got {type(prompt).__name__}")


def render_response(response: Any) -> str:
    """A response string, or the assistant turns of a message list joined."""
    if isinstance(response, str):
        return response
    if isinstance(response, list):
        turns = [m.get("content", "") for m in response if m.get("role", "assistant") == "assistant"]
        return "".join(turns)
    raise JobError(f"response must be a string or a list of messages, got {type(response).__name__}")


def fit_prompts(rows: list[dict], tokenizer, max_len: int, file: str) -> tuple[list[dict], list[str]]:
    """Render every prompt and leave out those longer than `max_len` tokens, as VERL's
    `data.filter_overlong_prompts` does (the launch review counted them: training/length_preflight.py).
    Returns the kept rows and their texts; refuses a file in which no prompt fits."""
    kept, texts, over = [], [], []
    for i, row in enumerate(rows, 1):
        text = render_prompt(row.get("prompt"), tokenizer)
        n = len(tokenizer(text, add_special_tokens=False).input_ids)
        if n > max_len:
            over.append((i, n))
            continue
        kept.append(row)
        texts.append(text)
    if over and not kept:
        raise JobError(f"{file}: every prompt is longer than hp.max_prompt_length={max_len} "
                       f"(row {over[0][0]}: {over[0][1]} tokens)")
    if over:
        print(f"note: {file}: left out {len(over)} of {len(rows)} prompts longer than "
              f"hp.max_prompt_length={max_len} (row {over[0][0]}: {over[0][1]} tokens)", flush=True)
    return kept, texts


class EpochSampler:
    """Yields batches of row indices; each epoch is a seeded permutation, the cursor resumable.

    The last incomplete batch of an epoch is dropped (as VERL's train dataloader does).
    """

    def __init__(self, n_rows: int, batch_size: int, seed: int) -> None:
        if batch_size > n_rows:
            raise JobError(f"hp.batch_size={batch_size} is larger than the {n_rows} training rows")
        self.n, self.batch_size, self.seed = n_rows, batch_size, seed
        self.epoch, self.pos = 0, 0
        self._order: list[int] | None = None

    @property
    def steps_per_epoch(self) -> int:
        return self.n // self.batch_size

    def _perm(self) -> list[int]:
        if self._order is None:
            g = torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
            self._order = torch.randperm(self.n, generator=g).tolist()
        return self._order

    def next_batch(self) -> list[int]:
        if self.pos + self.batch_size > self.n:
            self.epoch, self.pos, self._order = self.epoch + 1, 0, None
        batch = self._perm()[self.pos:self.pos + self.batch_size]
        self.pos += self.batch_size
        return batch

    def state_dict(self) -> dict[str, int]:
        return {"n": self.n, "batch_size": self.batch_size, "seed": self.seed, "epoch": self.epoch, "pos": self.pos}

    def load_state_dict(self, state: dict[str, int]) -> bool:
        """Restore the cursor; returns False (and starts over) when the data or batch changed."""
        if (state.get("n"), state.get("batch_size"), state.get("seed")) != (self.n, self.batch_size, self.seed):
            return False
        self.epoch, self.pos, self._order = int(state["epoch"]), int(state["pos"]), None
        return True
