"""Local (single process, CPU or one CUDA device) trainers: GRPO, distillation, reward model.

Entry point: `python -m training.local.train --run-dir DIR`. The maths of GRPO comes from
VERL's own `verl.trainer.ppo.core_algos`, so curves match the GPU backend's definitions.
"""
