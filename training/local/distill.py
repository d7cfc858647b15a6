"""Knowledge distillation from a frozen teacher into the (optionally LoRA) student.

offline:   responses are the row's `chosen` (else the teacher's greedy reply, SeqKD-style);
           loss = alpha * CE(student, response) + (1 - alpha) * T^2 * KL(teacher_T || student_T).
on_policy: the student samples; loss = per-token reverse KL(student || teacher) over the full
           vocabulary at the sampled positions (GKD with lambda=1), T = 1, alpha unused.
"""
from __future__ import annotations

import time

import torch

from training.local.common import position_ids, rollout
from training.local.config import Job, JobError
from training.local.data import fit_prompts, read_jsonl, render_response
from training.local.loop import Runtime, optimizer_step
from training.local.validation import greedy_responses, needs_base_references, reference_texts, validate_generation
from training.reward_client import RewardScorer


def kd_terms(student_logits: torch.Tensor, teacher_logits: torch.Tensor, targets: torch.Tensor,
             mask: torch.Tensor, temperature: float) -> dict[str, torch.Tensor]:
    """Token-mean CE, T^2-scaled forward KL and top-1 agreement over the masked positions.

    Shapes: logits (B, L, V), targets and mask (B, L).
    """
    denom = mask.sum().clamp(min=1)
    ce = -(torch.log_softmax(student_logits, -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1) * mask).sum() / denom
    t_logp = torch.log_softmax(teacher_logits / temperature, -1)
    s_logp = torch.log_softmax(student_logits / temperature, -1)
    kl_tok = (t_logp.exp() * (t_logp - s_logp)).sum(-1)
    kd = temperature ** 2 * (kl_tok * mask).sum() / denom
    agree = ((student_logits.argmax(-1) == teacher_logits.argmax(-1)).float() * mask).sum() / denom
    return {"ce": ce, "kd": kd, "top1": agree}


def reverse_kl(student_logits: torch.Tensor, teacher_logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Token-mean KL(student || teacher) over the full vocabulary at each masked position."""
    s_logp = torch.log_softmax(student_logits, -1)
    t_logp = torch.log_softmax(teacher_logits, -1)
    kl_tok = (s_logp.exp() * (s_logp - t_logp)).sum(-1)
    return (kl_tok * mask).sum() / mask.sum().clamp(min=1)


def distill_loss(parts: dict[str, torch.Tensor], alpha: float) -> torch.Tensor:
    return alpha * parts["ce"] + (1 - alpha) * parts["kd"]


class DistillTrainer:
    kind = "distill"

    def __init__(self, job: Job, scorer: RewardScorer | None) -> None:
        self.job, self.hp, self.scorer = job, job.hp, scorer
        self.rt = Runtime(job)
        self.model, self.tok = self.rt.load_policy()  # its optimizer: run_loop's
        self.rt.check_context(self.model, self.hp.max_prompt_length + self.hp.max_response_length)
        self.teacher, t_tok = self.rt.load_frozen(job.teacher_path)  # type: ignore[arg-type]
        if t_tok.get_vocab() != self.tok.get_vocab():
            raise JobError("teacher and student tokenizers differ: distillation needs the same vocabulary")
        self.rows, self.prompts = fit_prompts(read_jsonl(job.train_path), self.tok, self.hp.max_prompt_length,
                                              job.train_path.name)
        val_rows = read_jsonl(job.val_path) if job.val_path else []
        self.val_rows, self.val_prompts = fit_prompts(val_rows, self.tok, self.hp.max_prompt_length,
                                                      job.val_path.name) if val_rows else ([], [])
        self._val_refs: list | None = None
        self._val_teacher: list[str] | None = None

    # --- batches -------------------------------------------------------------------------
    def _responses(self, rows: list[dict], prompts: list[str]) -> list[str]:
        """The row's chosen response, or the teacher's greedy reply when the row has none."""
        out: list[str | None] = [render_response(r["chosen"]) if r.get("chosen") is not None else None for r in rows]
        missing = [i for i, r in enumerate(out) if r is None]
        if missing:
            with self.rt.autocast():
                gen = greedy_responses(self.teacher, self.tok, [prompts[i] for i in missing],
                                       self.hp.max_response_length)
            for i, text in zip(missing, gen, strict=True):
                out[i] = text
        return out  # type: ignore[return-value]

    def _teacher_forced(self, prompts: list[str], responses: list[str]):
        """(input_ids, attention_mask, targets, mask) for prompt + response + EOS, left padded."""
        seqs, masks = [], []
        for p, r in zip(prompts, responses, strict=True):
            # an empty prompt still needs one position from which to predict the first token
            p_ids = self.tok(p, add_special_tokens=False).input_ids or [self.tok.bos_token_id or self.tok.eos_token_id]
            r_ids = self.tok(r, add_special_tokens=False).input_ids[: self.hp.max_response_length - 1]
            r_ids = r_ids + [self.tok.eos_token_id]
            seqs.append(p_ids + r_ids)
            masks.append([0] * (len(p_ids) - 1) + [1] * len(r_ids))  # position t predicts token t+1
        width = max(len(s) for s in seqs)
        pad = self.tok.pad_token_id
        ids = torch.tensor([[pad] * (width - len(s)) + s for s in seqs])
        attn = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in seqs])
        loss_mask = torch.tensor([[0] * (width - len(s)) + m + [0] for s, m in zip(seqs, masks, strict=True)],
                                 dtype=torch.float32)
        dev = self.rt.device
        return ids.to(dev), attn.to(dev), ids[:, 1:].to(dev), loss_mask[:, :-1].to(dev)

    def _logits(self, model, ids, attn) -> torch.Tensor:
        with self.rt.autocast():
            return model(input_ids=ids, attention_mask=attn, position_ids=position_ids(attn)).logits[:, :-1].float()

    # --- steps ---------------------------------------------------------------------------
    def train_step(self, indices: list[int], step: int) -> dict[str, float]:
        t0 = time.perf_counter()
        rows = [self.rows[i] for i in indices]
        prompts = [self.prompts[i] for i in indices]
        if self.hp.distill_mode == "on_policy":
            return self._on_policy_step(prompts, t0)
        ids, attn, targets, mask = self._teacher_forced(prompts, self._responses(rows, prompts))
        self.model.train()
        total = float(mask.sum().clamp(min=1))
        sums = {"loss": 0.0, "kd": 0.0, "ce": 0.0, "top1": 0.0}
        for s in self._chunks(len(ids)):
            with torch.no_grad():
                t_logits = self._logits(self.teacher, ids[s], attn[s])
            s_logits = self._logits(self.model, ids[s], attn[s])
            v = min(s_logits.shape[-1], t_logits.shape[-1])
            parts = kd_terms(s_logits[..., :v], t_logits[..., :v], targets[s], mask[s], self.hp.distill_temperature)
            weight = float(mask[s].sum()) / total  # token-mean over the whole batch, not per chunk
            loss = distill_loss(parts, self.hp.distill_alpha) * weight
            loss.backward()
            sums["loss"] += float(loss.detach())
            for k in ("kd", "ce", "top1"):
                sums[k] += float(parts[k].detach()) * weight
        metrics = optimizer_step(self, self.hp)
        dt = time.perf_counter() - t0
        metrics.update({"distill/loss": sums["loss"], "distill/kd_loss": sums["kd"], "distill/ce_loss": sums["ce"],
                        "distill/top1_agreement": sums["top1"], "response_length/mean": float(mask.sum(-1).mean()),
                        "perf/throughput": float(attn.sum()) / dt})
        return metrics

    def _chunks(self, n: int) -> list[slice]:
        size = self.hp.micro_batch_size or n
        return [slice(i, i + size) for i in range(0, n, size)]

    def _on_policy_step(self, prompts: list[str], t0: float) -> dict[str, float]:
        with self.rt.autocast():
            ro = rollout(self.model, self.tok, prompts, 1, self.hp.max_response_length, temperature=self.hp.temperature)
        rl, mask = ro.response_len, ro.response_mask
        total = float(mask.sum().clamp(min=1))
        self.model.train()
        kl_sum, agree = 0.0, 0.0
        for s in self._chunks(len(mask)):
            ids, attn = ro.input_ids[s], ro.attention_mask[s]
            with torch.no_grad():
                t_logits = self._logits(self.teacher, ids, attn)[:, -rl:]
            s_logits = self._logits(self.model, ids, attn)[:, -rl:]
            v = min(s_logits.shape[-1], t_logits.shape[-1])
            weight = float(mask[s].sum()) / total
            loss = reverse_kl(s_logits[..., :v], t_logits[..., :v], mask[s]) * weight
            loss.backward()
            kl_sum += float(loss.detach())
            agree += float(((s_logits.argmax(-1) == t_logits.argmax(-1)).float() * mask[s]).sum()) / total
        metrics = optimizer_step(self, self.hp)
        dt = time.perf_counter() - t0
        metrics.update({"distill/loss": kl_sum, "distill/kd_loss": kl_sum, "distill/top1_agreement": agree,
                        "response_length/mean": float(mask.sum(-1).mean()),
                        "perf/throughput": float(ro.attention_mask.sum()) / dt})
        return metrics

    # --- validation ----------------------------------------------------------------------
    @torch.no_grad()
    def validate(self, step: int) -> dict[str, float]:
        if not self.val_rows:
            return {}
        if self._val_teacher is None:
            self._val_teacher = self._responses(self.val_rows, self.val_prompts)
        kd, top1, n = 0.0, 0.0, 0
        for i in range(0, len(self.val_rows), 64):
            sl = slice(i, i + 64)
            ids, attn, targets, mask = self._teacher_forced(self.val_prompts[sl], self._val_teacher[sl])
            t_logits, s_logits = self._logits(self.teacher, ids, attn), self._logits(self.model, ids, attn)
            v = min(s_logits.shape[-1], t_logits.shape[-1])
            parts = kd_terms(s_logits[..., :v], t_logits[..., :v], targets, mask, self.hp.distill_temperature)
            rows = len(ids)
            kd, top1, n = kd + float(parts["kd"]) * rows, top1 + float(parts["top1"]) * rows, n + rows
        metrics = {"val/distill/kd_loss": kd / n, "val/distill/top1_agreement": top1 / n}
        if self.scorer is not None:
            metrics.update(self._val_generation(step))
        return metrics

    def _val_generation(self, step: int) -> dict[str, float]:
        if self._val_refs is None:
            base = None
            if needs_base_references(self.val_rows):
                base_model, _ = self.rt.load_frozen(self.job.model_path)
                base = greedy_responses(base_model, self.tok, self.val_prompts, self.hp.max_response_length,
                                        autocast=self.rt.autocast)
                del base_model
            self._val_refs = reference_texts(self.val_rows, base)
        return validate_generation(model=self.model, tok=self.tok, rows=self.val_rows, prompts=self.val_prompts,
                                   scorer=self.scorer, references=self._val_refs, step=step,  # type: ignore[arg-type]
                                   max_response_length=self.hp.max_response_length, run_dir=self.job.run_dir,
                                   autocast=self.rt.autocast)

    def close(self) -> None:
        return None
