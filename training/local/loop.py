"""The step loop every local trainer shares: batches, validation, metrics, checkpoints, resume."""
from __future__ import annotations

import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Protocol

import torch

from training import checkpoints as ckpts
from training.local.common import MetricsLogger, rng_state, set_rng_state
from training.local.config import Job, JobError
from training.local.data import EpochSampler
from training.models import load_model_and_tokenizer, load_tokenizer, resolve_device, resolve_dtype
from training.rundir import RunDir


class Algorithm(Protocol):
    kind: str
    model: Any
    tok: Any
    optimizer: torch.optim.Optimizer  # both set by run_loop (make_optimizer) for `model`'s trainable weights
    scheduler: Any

    def train_step(self, indices: list[int], step: int) -> dict[str, float]: ...

    def validate(self, step: int) -> dict[str, float]: ...

    def close(self) -> None: ...


class Runtime:
    """Device, compute dtype and model loading shared by the trainers."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.device = resolve_device(job.hp.device)
        self.compute_dtype = resolve_dtype(job.hp.dtype, self.device)

    def autocast(self):
        """bf16/fp16 compute over fp32 master weights; a no-op in fp32."""
        if self.compute_dtype == torch.float32:
            return nullcontext()
        return torch.autocast(self.device.type, dtype=self.compute_dtype)

    def load_policy(self, kind: str = "causal_lm"):
        """The trainable model: from the resumed checkpoint when there is one, else the base (+ fresh LoRA)."""
        job = self.job
        resume_model = job.resume_from / "model" if job.resume_from else None
        lora = job.hp.lora if job.lora_rank > 0 else None
        if resume_model is not None:
            is_adapter = (resume_model / "adapter_config.json").exists()
            if is_adapter != bool(lora):
                held = "a LoRA adapter" if is_adapter else "full weights"
                raise JobError(f"resume_from {job.resume_from} holds {held} "
                               f"but this job has hp.lora.rank={job.lora_rank}")
            if is_adapter:
                return load_model_and_tokenizer(job.model_path, self.device, torch.float32,
                                                adapter_path=resume_model, kind=kind)
            model, _ = load_model_and_tokenizer(resume_model, self.device, torch.float32, kind=kind)
            return model, load_tokenizer(job.model_path)
        return load_model_and_tokenizer(job.model_path, self.device, torch.float32, lora=lora, kind=kind)

    def check_context(self, model, need: int) -> None:
        """Refuse a job whose prompt + response cannot fit the model's position table."""
        cfg = getattr(model, "config", None)
        limit = getattr(cfg, "max_position_embeddings", None)
        if limit and need > limit:
            raise JobError(f"hp.max_prompt_length + hp.max_response_length = {need} exceeds the model's "
                           f"max_position_embeddings = {limit}")

    def load_frozen(self, path: Path, kind: str = "causal_lm"):
        """A frozen model in the compute dtype (reference policy, teacher)."""
        model, tok = load_model_and_tokenizer(path, self.device, self.compute_dtype, kind=kind)
        model.eval()
        for p in model.parameters():
            p.requires_grad_(False)
        return model, tok


def make_optimizer(model, hp) -> tuple[torch.optim.Optimizer, Any]:
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=hp.lr, weight_decay=hp.weight_decay)
    warm = max(0, hp.warmup_steps)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm) if warm else 1.0)
    return opt, sched


def optimizer_step(algo: Algorithm, hp) -> dict[str, float]:
    """Clip, step (skipped when the gradient is not finite, as VERL does) and report norm and lr."""
    params = [p for p in algo.model.parameters() if p.requires_grad]
    lr = algo.scheduler.get_last_lr()[0]
    norm = torch.nn.utils.clip_grad_norm_(params, hp.grad_clip if hp.grad_clip > 0 else float("inf"))
    if torch.isfinite(norm):
        algo.optimizer.step()
    algo.optimizer.zero_grad(set_to_none=True)
    algo.scheduler.step()
    return {"actor/grad_norm": float(norm), "actor/lr": lr}


def total_steps(job: Job, sampler: EpochSampler) -> int:
    return job.hp.max_steps or job.hp.epochs * sampler.steps_per_epoch


def save_checkpoint(job: Job, algo: Algorithm, sampler: EpochSampler, step: int, metrics: dict) -> Path:
    def write(tmp: Path) -> None:
        algo.model.save_pretrained(tmp / "model")
        algo.tok.save_pretrained(tmp / "model")
        torch.save({"step": step, "kind": job.kind, "optimizer": algo.optimizer.state_dict(),
                    "scheduler": algo.scheduler.state_dict(), "sampler": sampler.state_dict(),
                    "rng": rng_state()}, tmp / "trainer_state.pt")

    manifest = {"kind": job.kind, "format": "local", "lora": job.lora_rank > 0, "base_model": str(job.model_path),
                "job_id": job.job_id, "attempt": ckpts.current_attempt(),
                "metrics": {k: v for k, v in metrics.items() if _finite(v)}}
    root = RunDir(job.run_dir).checkpoints
    path = ckpts.publish_checkpoint(root, step, write, manifest)
    ckpts.apply_retention(root, job.hp.keep_last_k, attempt=manifest["attempt"])
    return path


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and v == v and abs(v) != float("inf")


def _use_job_lr(algo: Algorithm, lr: float) -> None:
    """The job's lr wins over the one saved with the optimizer: a rollback or a KL-guard restore
    resumes a checkpoint with a changed hp.lr (the warm-up position is kept)."""
    sched = algo.scheduler
    sched.base_lrs = [lr] * len(sched.base_lrs)
    for group, factor in zip(algo.optimizer.param_groups, sched.lr_lambdas, strict=True):
        group["initial_lr"] = lr
        group["lr"] = lr * factor(sched.last_epoch)
    sched._last_lr = [g["lr"] for g in algo.optimizer.param_groups]


def restore(job: Job, algo: Algorithm, sampler: EpochSampler) -> tuple[int, dict | None]:
    """Load optimizer, scheduler and cursor from job.resume_from; returns (step, rng state)."""
    state = torch.load(job.resume_from / "trainer_state.pt", map_location="cpu", weights_only=False)
    if state.get("kind") != job.kind:
        raise JobError(f"resume_from is a {state.get('kind')} checkpoint but this job is {job.kind}")
    try:
        algo.optimizer.load_state_dict(state["optimizer"])
        algo.scheduler.load_state_dict(state["scheduler"])
    except (ValueError, KeyError) as exc:
        raise JobError(f"optimizer state in {job.resume_from} does not fit this model: {exc}") from None
    _use_job_lr(algo, job.hp.lr)
    if not sampler.load_state_dict(state["sampler"]):
        print(f"note: training data or batch size differ from {job.resume_from}; starting the data from epoch 0",
              flush=True)
    return int(state["step"]), state.get("rng")


def run_loop(job: Job, algo: Algorithm, n_rows: int, logger: MetricsLogger) -> int:
    """Train to the end; returns the last step. Resumed runs continue at step N+1 with the saved RNG. The loop
    owns the optimizer: it makes it for the algorithm's trainable weights, steps, saves and restores it."""
    hp = job.hp
    algo.optimizer, algo.scheduler = make_optimizer(algo.model, hp)
    if hp.batch_size > n_rows:  # as VERL does: a small dataset (say, an exported arena) trains one batch per epoch
        print(f"note: hp.batch_size={hp.batch_size} is larger than the {n_rows} training rows; using {n_rows}",
              flush=True)
    sampler = EpochSampler(n_rows, min(hp.batch_size, n_rows), hp.seed)
    last = total_steps(job, sampler)
    start, saved_rng = (0, None)
    ckpts.clean_stale_temp(RunDir(job.run_dir).checkpoints)
    if job.resume_from is not None:
        start, saved_rng = restore(job, algo, sampler)
        if saved_rng is not None:
            set_rng_state(saved_rng)
        print(f"resumed from {job.resume_from} at step {start}", flush=True)
    elif hp.test_freq > 0:
        t0 = time.perf_counter()
        val = algo.validate(0)
        if val:
            logger.log({**val, "timing_s/testing": time.perf_counter() - t0}, step=0)
    if start >= last:
        print(f"nothing to do: checkpoint step {start} >= total steps {last}", flush=True)
        return start
    for step in range(start + 1, last + 1):
        t0 = time.perf_counter()
        metrics = algo.train_step(sampler.next_batch(), step)
        if hp.test_freq > 0 and (step % hp.test_freq == 0 or step == last):
            t1 = time.perf_counter()
            metrics.update(algo.validate(step))
            metrics["timing_s/testing"] = time.perf_counter() - t1
        metrics["timing_s/step"] = time.perf_counter() - t0
        metrics["training/global_step"] = step
        metrics["training/epoch"] = sampler.epoch
        logger.log(metrics, step=step)
        if hp.save_freq > 0 and (step % hp.save_freq == 0 or step == last):
            save_checkpoint(job, algo, sampler, step, metrics)
    return last
