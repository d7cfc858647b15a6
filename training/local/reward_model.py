"""Bradley-Terry reward model: loss = -log sigmoid(r(prompt+chosen) - r(prompt+rejected)).

The model is an HF sequence-classification model with one logit; checkpoints are ordinary
HF folders (or LoRA adapters, merged by `training.checkpoints.export_hf`) that a job's
`reward` block can use as a `model` component.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from training.local.config import Job, JobError
from training.local.data import read_jsonl, render_prompt, render_response
from training.local.loop import Runtime, optimizer_step
from training.reward_client import join_prompt_response


def bradley_terry(r_chosen: torch.Tensor, r_rejected: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean loss, accuracy) of a batch of reward pairs."""
    loss = -F.logsigmoid(r_chosen - r_rejected).mean()
    acc = (r_chosen > r_rejected).float().mean()
    return loss, acc


def pair_texts(rows: list[dict], tok, file: str) -> list[tuple[str, str]]:
    out = []
    for i, row in enumerate(rows, 1):
        if row.get("chosen") is None or row.get("rejected") is None:
            raise JobError(f"{file} row {i}: a reward-model row needs both 'chosen' and 'rejected'")
        prompt = render_prompt(row.get("prompt"), tok)
        out.append((join_prompt_response(prompt, render_response(row["chosen"])),
                    join_prompt_response(prompt, render_response(row["rejected"]))))
    return out


class RewardModelTrainer:
    kind = "reward_model"

    def __init__(self, job: Job) -> None:
        self.job, self.hp = job, job.hp
        self.rt = Runtime(job)
        self.model, self.tok = self.rt.load_policy(kind="seq_cls")  # its optimizer: run_loop's
        self.tok.truncation_side = "left"  # the score is read at the last token: keep the response end
        limit = getattr(self.model.config, "max_position_embeddings", None) or self.hp.max_seq_len
        self.max_len = min(self.hp.max_seq_len, limit)
        self.rows = read_jsonl(job.train_path)
        self.pairs = pair_texts(self.rows, self.tok, job.train_path.name)
        val_rows = read_jsonl(job.val_path) if job.val_path else []
        self.val_pairs = pair_texts(val_rows, self.tok, job.val_path.name) if val_rows else []

    def _rewards(self, pairs: list[tuple[str, str]]) -> tuple[torch.Tensor, torch.Tensor]:
        texts = [c for c, _ in pairs] + [r for _, r in pairs]
        enc = self.tok(texts, return_tensors="pt", padding=True, truncation=True, max_length=self.max_len,
                       add_special_tokens=False).to(self.rt.device)
        with self.rt.autocast():
            scores = self.model(**enc).logits[:, 0].float()
        return scores[: len(pairs)], scores[len(pairs):]

    def train_step(self, indices: list[int], step: int) -> dict[str, float]:
        self.model.train()
        size = self.hp.micro_batch_size or len(indices)
        parts = []
        for i in range(0, len(indices), size):
            chunk = [self.pairs[j] for j in indices[i:i + size]]
            rc_c, rr_c = self._rewards(chunk)
            (bradley_terry(rc_c, rr_c)[0] * len(chunk) / len(indices)).backward()  # mean over the whole batch
            parts.append((rc_c.detach(), rr_c.detach()))
        rc, rr = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
        loss, acc = bradley_terry(rc, rr)
        metrics = optimizer_step(self, self.hp)
        metrics.update({"rm/loss": float(loss.detach()), "rm/accuracy": float(acc),
                        "rm/margin": float((rc - rr).mean()), "rm/chosen_reward/mean": float(rc.mean()),
                        "rm/rejected_reward/mean": float(rr.mean())})
        return metrics

    @torch.no_grad()
    def validate(self, step: int) -> dict[str, float]:
        if not self.val_pairs:
            return {}
        self.model.eval()
        losses, accs, n = 0.0, 0.0, 0
        for i in range(0, len(self.val_pairs), 64):
            chunk = self.val_pairs[i:i + 64]
            loss, acc = bradley_terry(*self._rewards(chunk))
            losses, accs, n = losses + float(loss) * len(chunk), accs + float(acc) * len(chunk), n + len(chunk)
        return {"rm/val_loss": losses / n, "rm/val_accuracy": accs / n}

    def close(self) -> None:
        return None
