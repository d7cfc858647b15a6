"""GRPO on one device with VERL's own maths (verl.trainer.ppo.core_algos).

One step: sample `group_size` responses per prompt, score them with the RewardScorer, turn
the outcome scores into group-normalised advantages, and take one clipped-policy-gradient
update with a `low_var_kl` (k3) penalty to the frozen reference policy. With LoRA the
reference is the base model with the adapters disabled. kl_coef = 0 means no KL term and no reference model
(VERL's use_kl_loss=False: no reference worker), as on the VERL backend.
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from training import guard_builtins, rollouts
from training.garbled import garbled_metrics
from training.ingest import write_rollout_summary
from training.local.common import Rollout, masked_mean, rollout, token_logprobs
from training.local.config import Job
from training.local.data import fit_prompts, read_jsonl
from training.local.grpo_rows import rollout_rows
from training.local.loop import Runtime, optimizer_step
from training.local.token_stats import probs_diff_metrics
from training.local.validation import greedy_responses, needs_base_references, reference_texts, validate_generation
from training.reward_client import RewardRequest, RewardScorer


def _core():
    # Imported lazily: `import verl` pulls in ray and takes seconds.
    from verl.trainer.ppo import core_algos

    return core_algos


def actor_config(hp, rollout_n: int, micro_batch: int):
    """The VERL ActorConfig that drives compute_policy_loss_vanilla exactly as on the GPU path."""
    from verl.workers.config import ActorConfig

    return ActorConfig(strategy="fsdp", rollout_n=rollout_n, ppo_mini_batch_size=hp.batch_size,
                       ppo_micro_batch_size_per_gpu=micro_batch, clip_ratio=hp.clip_ratio,
                       clip_ratio_low=hp.clip_ratio, clip_ratio_high=hp.clip_ratio, loss_agg_mode=hp.loss_agg_mode,
                       use_kl_loss=hp.kl_coef > 0, kl_loss_coef=hp.kl_coef, kl_loss_type=hp.kl_loss_type,
                       entropy_coeff=hp.entropy_coeff)


def outcome_rewards(scores: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Put each sequence's score on its last response token (VERL's token_level_scores)."""
    out = torch.zeros_like(response_mask, dtype=torch.float32)
    last = (response_mask.sum(-1).long() - 1).clamp(min=0)
    out[torch.arange(len(scores)), last] = scores.float()
    return out


def group_advantages(scores: torch.Tensor, response_mask: torch.Tensor, group_size: int) -> torch.Tensor:
    """GRPO advantages for grouped rows (prompt i owns rows i*n .. i*n+n-1)."""
    index = np.repeat(np.arange(len(scores) // group_size), group_size)
    adv, _ = _core().compute_grpo_outcome_advantage(outcome_rewards(scores, response_mask), response_mask, index)
    return adv


def tied_group_share(scores: torch.Tensor, group_size: int) -> float:
    """`training.guard_builtins.tied_group_share` over grouped rows (prompt i owns rows i*n .. i*n+n-1)."""
    return guard_builtins.tied_group_share(scores.float().view(-1, group_size).tolist()) or 0.0


def policy_loss(cfg, logp: torch.Tensor, old_logp: torch.Tensor, ref_logp: torch.Tensor | None,
                advantages: torch.Tensor, mask: torch.Tensor,
                entropy: torch.Tensor | None) -> tuple[torch.Tensor, dict[str, float]]:
    """VERL's actor loss: vanilla clipped PG - entropy_coeff * entropy + kl_coef * KL(policy, ref); without a KL
    term (`cfg.use_kl_loss` off: kl_coef 0) there is no reference and no KL metric, as in VERL.

    `cfg.global_batch_info` must describe the whole batch so micro-batch losses add up to it.
    """
    core = _core()
    pg_loss, pg_metrics = core.get_policy_loss_fn("vanilla")(
        old_log_prob=old_logp, log_prob=logp, advantages=advantages, response_mask=mask,
        loss_agg_mode=cfg.loss_agg_mode, config=cfg)
    loss = pg_loss
    metrics = {**pg_metrics, "actor/pg_loss": float(pg_loss.detach())}
    if cfg.use_kl_loss:
        kld = core.kl_penalty(logprob=logp, ref_logprob=ref_logp, kl_penalty=cfg.kl_loss_type)
        kl_loss = core.agg_loss(loss_mat=kld, loss_mask=mask, loss_agg_mode=cfg.loss_agg_mode,
                                **cfg.global_batch_info)
        loss = loss + cfg.kl_loss_coef * kl_loss
        metrics["actor/kl_loss"] = float(kl_loss.detach())
    if entropy is not None:
        ent = core.agg_loss(loss_mat=entropy, loss_mask=mask, loss_agg_mode=cfg.loss_agg_mode, **cfg.global_batch_info)
        if cfg.entropy_coeff != 0:  # as VERL: no entropy term in the loss (nor its backward) at coefficient 0
            loss = loss - cfg.entropy_coeff * ent
        metrics["actor/entropy"] = float(ent.detach())
    return loss, metrics


def _fit_val(path, tok, max_prompt: int) -> tuple[list[dict], list[str]]:
    """The validation rows whose prompts fit `max_prompt` tokens, and those prompts (none without a file)."""
    rows = read_jsonl(path) if path else []
    return fit_prompts(rows, tok, max_prompt, path.name) if rows else ([], [])


class GRPOTrainer:
    kind = "grpo"

    def __init__(self, job: Job, scorer: RewardScorer) -> None:
        hp = job.hp
        self.job, self.hp, self.scorer = job, hp, scorer
        # What construction reads from the settings, first: the loss's settings (kl_coef among them), the lengths
        # and the files. The loading below (loop.Runtime) is handed these values and nothing comes back to them.
        self.micro = hp.micro_batch_size or hp.batch_size * hp.group_size
        self.cfg = actor_config(hp, hp.group_size, self.micro)
        self.lora = job.lora_rank > 0
        self.use_kl = self.cfg.use_kl_loss  # kl_coef 0: no KL term, so no reference model is loaded
        max_prompt, context = hp.max_prompt_length, hp.max_prompt_length + hp.max_response_length
        base, train_path, val_path = job.model_path, job.train_path, job.val_path
        self.rt = Runtime(job)
        self.model, self.tok = self.rt.load_policy()  # its optimizer: run_loop's
        self.rt.check_context(self.model, context)
        self.ref = self.rt.load_frozen(base)[0] if self.use_kl and not self.lora else None
        self.rows, self.prompts = fit_prompts(read_jsonl(train_path), self.tok, max_prompt, train_path.name)
        self.val_rows, self.val_prompts = _fit_val(val_path, self.tok, max_prompt)
        self._val_refs: list[str | None] | None = None

    @contextmanager
    def reference(self) -> Iterator[Any]:
        """The frozen reference policy: base weights, or the policy with its adapters switched off. Without a KL
        term only validation may ask for it (base-model answers as references): loaded for that, then freed."""
        if self.lora:
            with self.model.disable_adapter():
                yield self.model
        elif self.ref is not None:
            yield self.ref
        else:
            base = self.rt.load_frozen(self.job.model_path)[0]
            try:
                yield base
            finally:
                del base

    def _chunks(self, n: int) -> list[slice]:
        return [slice(i, i + self.micro) for i in range(0, n, self.micro)]

    def train_step(self, indices: list[int], step: int) -> dict[str, float]:
        hp, times = self.hp, {}
        rows = [self.rows[i] for i in indices]
        prompts = [self.prompts[i] for i in indices]
        t = time.perf_counter()
        self.model.eval()
        with self.rt.autocast():
            ro: Rollout = rollout(self.model, self.tok, prompts, hp.group_size, hp.max_response_length,
                                  temperature=hp.temperature, record_logprobs=True)
        times["timing_s/gen"] = time.perf_counter() - t
        t = time.perf_counter()
        reqs = [RewardRequest(prompt=prompts[j // hp.group_size], response=text,
                              ground_truth=rows[j // hp.group_size].get("ground_truth"),
                              data_source=str(rows[j // hp.group_size].get("data_source") or "default"),
                              extra_info=rows[j // hp.group_size].get("extra_info") or {})
                 for j, text in enumerate(ro.texts)]
        results = self.scorer.score(reqs)
        scores = torch.tensor([r.score for r in results], dtype=torch.float32, device=ro.input_ids.device)
        times["timing_s/reward"] = time.perf_counter() - t
        mask = ro.response_mask
        adv = group_advantages(scores, mask, hp.group_size)
        rl = ro.response_len
        ref_logp = None
        if self.use_kl:
            t = time.perf_counter()
            with torch.no_grad(), self.reference() as ref, self.rt.autocast():
                ref_logp = torch.cat([token_logprobs(ref, ro.input_ids[s], ro.attention_mask[s], rl,
                                                     hp.temperature, group=hp.group_size)[0]
                                      for s in self._chunks(len(scores))])
            times["timing_s/ref"] = time.perf_counter() - t
        t = time.perf_counter()
        self.cfg.global_batch_info.update(
            dp_size=1, batch_num_tokens=int(mask.sum()), global_batch_size=len(scores),
            loss_scale_factor=hp.max_response_length if hp.loss_agg_mode == "seq-mean-token-sum-norm" else None)
        self.model.train()
        sums: dict[str, float] = {}
        chunks = self._chunks(len(scores))
        policy_logp, policy_ent = [], []
        for s in chunks:
            with self.rt.autocast():
                logp, ent = token_logprobs(self.model, ro.input_ids[s], ro.attention_mask[s], rl, hp.temperature,
                                           with_entropy=True, entropy_grad=hp.entropy_coeff != 0, group=hp.group_size)
            policy_logp.append(logp.detach().float())
            policy_ent.append(ent.detach().float())
            # One update per batch: the rollout policy is the current one, so old = current (ratio 1).
            loss, m = policy_loss(self.cfg, logp, logp.detach(), None if ref_logp is None else ref_logp[s], adv[s],
                                  mask[s], ent)
            loss.backward()
            for k, v in m.items():
                # losses are already normalised by the whole batch (sum them); ratios are per chunk (average)
                w = 1.0 if k in ("actor/pg_loss", "actor/kl_loss", "actor/entropy") else 1.0 / len(chunks)
                sums[k] = sums.get(k, 0.0) + w * v
        # VERL logs actor/kl_coef (and actor/kl_loss) only with a KL term
        metrics = {**sums, **optimizer_step(self, hp), **({"actor/kl_coef": hp.kl_coef} if self.use_kl else {})}
        times["timing_s/update_actor"] = time.perf_counter() - t
        lengths = mask.sum(-1)
        train_logp = torch.cat(policy_logp)
        if ro.logprobs is not None:
            metrics.update(probs_diff_metrics(train_logp, ro.logprobs, mask))
        stored = rollout_rows(step=step, prompts=prompts, rows=rows, ro=ro, results=results, names=self.scorer.names,
                              advantages=adv, logratio=None if ref_logp is None else train_logp - ref_logp.float(),
                              tok=self.tok,
                              group_size=hp.group_size, max_response_length=hp.max_response_length,
                              entropy=torch.cat(policy_ent), train_logp=train_logp)
        rollouts.write_step(self.job.run_dir, step, stored)
        write_rollout_summary(self.job.run_dir, step)  # the web app's sync reads it instead of the dump
        rollouts.prune(self.job.run_dir, hp.rollout_keep_last, hp.rollout_keep_every, hp.rollout_max_mb)
        plen = ro.attention_mask[:, : ro.prompt_len].sum(-1).float()
        n_tokens = float(lengths.sum() + plen.sum())
        step_time = sum(times.values())
        metrics.update({
            "critic/score/mean": float(scores.mean()), "critic/score/max": float(scores.max()),
            "critic/score/min": float(scores.min()), "critic/score/std": float(scores.std()),
            rollouts.TOTAL_METRIC: float(scores.mean()),  # the advantages' input: the optimised total
            guard_builtins.TIED_SHARE: tied_group_share(scores, hp.group_size),
            "critic/advantages/mean": masked_mean(adv, mask), "critic/advantages/max": float(adv[mask > 0].max()),
            "critic/advantages/min": float(adv[mask > 0].min()),
            "response_length/mean": float(lengths.mean()), "response_length/max": float(lengths.max()),
            "response_length/min": float(lengths.min()),
            "response_length/clip_ratio": float((lengths >= hp.max_response_length).float().mean()),
            "prompt_length/mean": float(plen.mean()), "prompt_length/max": float(plen.max()),
            "reward/error_count": float(sum(1 for r in results if r.error)),
            "perf/total_num_tokens": n_tokens, "perf/throughput": n_tokens / step_time if step_time else None,
            **times,
        })
        metrics.update(rollouts.component_metrics(stored))
        metrics.update(garbled_metrics(stored))  # VERL: the same, from its dump at ingest
        if self.scorer.slowest:  # the slowest reward call of the step: one outlier can stall a whole batch
            metrics["perf/reward_slowest_sample_ms"] = self.scorer.slowest[0][1]
        return metrics

    def validate(self, step: int) -> dict[str, float]:
        if not self.val_rows:
            return {}
        if self._val_refs is None:
            base = None
            if needs_base_references(self.val_rows):
                with self.reference() as ref:
                    base = greedy_responses(ref, self.tok, self.val_prompts, self.hp.max_response_length,
                                            autocast=self.rt.autocast)
            self._val_refs = reference_texts(self.val_rows, base)
        return validate_generation(model=self.model, tok=self.tok, rows=self.val_rows, prompts=self.val_prompts,
                                   scorer=self.scorer, references=self._val_refs, step=step,
                                   max_response_length=self.hp.max_response_length, run_dir=self.job.run_dir,
                                   autocast=self.rt.autocast)

    def close(self) -> None:
        return None
