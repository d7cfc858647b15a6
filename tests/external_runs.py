"""Run folders written outside the app, by the trainers' own writers: VERL 0.9.1's file logger (FileLogger),
its rollout/validation dump writer (`_write_generations`), its FSDP checkpoint layout for world size 1 and Hydra's
composed config; TRL's GRPOTrainer completion tables and trainer_state.json. Shared by the attach tests."""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path


class VerlRun:
    """A VERL run by hand: `python -m verl.trainer.main_ppo trainer.logger=[console,file]
    trainer.rollout_data_dir=<root>/rollouts trainer.validation_data_dir=<root>/val_generations
    trainer.default_local_dir=<root>/checkpoints hydra.run.dir=<root>/outputs` with
    VERL_FILE_LOGGER_ROOT=<root>/logs."""

    def __init__(self, root: Path, model_dir: Path) -> None:
        from verl.utils.tracking import FileLogger

        self.root, self.model_dir = Path(root), Path(model_dir)
        self.root.mkdir(parents=True, exist_ok=True)
        saved = {k: os.environ.pop(k, None) for k in ("VERL_FILE_LOGGER_PATH", "VERL_FILE_LOGGER_ROOT")}
        os.environ["VERL_FILE_LOGGER_ROOT"] = str(self.root / "logs")
        try:
            self.logger = FileLogger("gsm8k_grpo", "qwen_run1")  # <root>/logs/gsm8k_grpo/qwen_run1.jsonl, "wb"
        finally:
            for k, v in saved.items():
                os.environ.pop(k, None)
                if v is not None:
                    os.environ[k] = v
        self._hydra()

    def _hydra(self) -> None:
        from omegaconf import OmegaConf

        from tests.training.backends.conftest import compose_verl

        cfg = compose_verl(["algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=2",
                            f"actor_rollout_ref.model.path={self.model_dir}", "trainer.logger=[console,file]"])
        hydra = self.root / "outputs" / ".hydra"
        hydra.mkdir(parents=True)
        (hydra / "config.yaml").write_text(OmegaConf.to_yaml(cfg))

    def step(self, step: int, metrics: dict[str, float], prompts: list[str], answers: list[list[str]],
             truth: list[str]) -> None:
        """One training step: the rollout dump (balance_batch order: interleaved groups), then the metrics line."""
        from verl.trainer.ppo.ray_trainer import RayPPOTrainer

        inputs, outputs, gts, scores = [], [], [], []
        for i in range(max(len(a) for a in answers)):
            for p, a, t in zip(prompts, answers, truth, strict=True):
                if i < len(a):
                    inputs.append(p)
                    outputs.append(a[i])
                    gts.append(t)
                    scores.append(float(a[i].strip() == t))
        RayPPOTrainer._write_generations(inputs=inputs, outputs=outputs, gts=gts, scores=scores,
                                         reward_extra_infos_dict={"acc": scores}, dump_path=str(self.root / "rollouts"),
                                         global_steps=step)
        self.logger.log({"training/global_step": step, **metrics}, step)

    def validate(self, step: int, prompts: list[str], answers: list[str], truth: list[str]) -> None:
        from verl.trainer.ppo.ray_trainer import RayPPOTrainer

        scores = [float(a == t) for a, t in zip(answers, truth, strict=True)]
        RayPPOTrainer._write_generations(inputs=prompts, outputs=answers, gts=truth, scores=scores,
                                         reward_extra_infos_dict={}, dump_path=str(self.root / "val_generations"),
                                         global_steps=step)

    def checkpoint(self, step: int) -> Path:
        """`global_step_N/` as VERL's FSDP checkpoint manager leaves it for world size 1, then the tracker file."""
        import torch
        from transformers import AutoModelForCausalLM

        actor = self.root / "checkpoints" / f"global_step_{step}" / "actor"
        (actor / "huggingface").mkdir(parents=True)
        model = AutoModelForCausalLM.from_pretrained(self.model_dir)
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        torch.save(state, actor / "model_world_size_1_rank_0.pt")
        torch.save({}, actor / "optim_world_size_1_rank_0.pt")
        torch.save({"lr_scheduler": {}}, actor / "extra_state_world_size_1_rank_0.pt")
        (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 1}))
        for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"):
            if (self.model_dir / name).exists():
                shutil.copy(self.model_dir / name, actor / "huggingface" / name)
        torch.save({"dataloader": {}}, actor.parent / "data.pt")
        (self.root / "checkpoints" / "latest_checkpointed_iteration.txt").write_text(str(step))
        return actor.parent

    def settle(self) -> None:
        """Make every dump look finished (the follower copies a dump once it has not changed for a few seconds)."""
        old = time.time() - 60
        for path in self.root.rglob("*.jsonl"):
            os.utime(path, (old, old))

    def snapshot(self) -> dict[str, tuple[int, int]]:
        """Every file's size and modification time: what following must leave as it was."""
        return {str(p.relative_to(self.root)): (p.stat().st_size, p.stat().st_mtime_ns)
                for p in sorted(self.root.rglob("*")) if p.is_file()}


def write_trl_run(output_dir: Path, steps: dict[int, list[tuple[str, str, float, float]]]) -> Path:
    """TRL GRPOTrainer's `log_completions` tables (`completions/completions_<step:05d>.parquet`, built as its
    `log()` builds them: step, prompt, completion, one column per reward function, advantage) and a checkpoint's
    trainer_state.json with the logged metrics."""
    import pandas as pd

    (output_dir / "completions").mkdir(parents=True, exist_ok=True)
    history = []
    for step, rows in steps.items():
        table = {"step": [step] * len(rows), "prompt": [[{"role": "user", "content": p}] for p, *_ in rows],
                 "completion": [[{"role": "assistant", "content": c}] for _, c, *_ in rows],
                 "accuracy_reward": [r for *_, r, _a in rows], "advantage": [a for *_, a in rows]}
        pd.DataFrame(table).to_parquet(output_dir / "completions" / f"completions_{step:05d}.parquet")
        rewards = [r for *_, r, _a in rows]
        history.append({"step": step, "epoch": 0.1 * step, "loss": 0.01 * step, "reward": sum(rewards) / len(rewards),
                        "kl": 0.001 * step, "entropy": 1.5, "completions/mean_length": 3.0,
                        "rewards/accuracy_reward/mean": sum(rewards) / len(rewards)})
    ckpt = output_dir / f"checkpoint-{max(steps)}"
    ckpt.mkdir(parents=True, exist_ok=True)
    (ckpt / "trainer_state.json").write_text(json.dumps({"global_step": max(steps), "log_history": history}))
    return output_dir
