"""VERL's real trainer on a CPU-only machine: rehearse a VERL job with a tiny model before the GPU run.

A job with `hp.device = "cpu"` on the VERL backend runs the same `python -m verl.trainer.main_ppo`
as on a GPU host, with three differences, all set up here:

- `PLUGIN_MODULE` is imported by VERL in every Ray process (`VERL_USE_EXTERNAL_MODULES`): a `cpu`
  platform on gloo, the `hf` rollout server and one patch (see `plugin.py`);
- `cpu_overrides` swaps the GPU-only choices (vLLM/SGLang, torch.compile, remove-padding kernels,
  TransferQueue's storage for the V1 trainer) for CPU ones and fakes the GPU that VERL's resource pools count;
- each attempt gets a private Ray cluster (`address=local`, its own short temp dir, random ports),
  so two runs on one machine never join each other and a cancel can find every Ray process.

This module imports neither VERL nor torch: the web app builds launch plans with it.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any

from training.verl_cpu.ray_startup import RAY_STARTUP_ENV

PLUGIN_MODULE = "training.verl_cpu.plugin"
ROLLOUT_NAME = "hf"
RAY_TMP_PREFIX = "rlhf-ray-"
# Set on a private cluster: the folder where the trainer's ranks meet (plugin.private_rendezvous).
STORE_DIR_ENV = "WORKBENCH_C10D_STORE_DIR"
# Set for a V1 run (trainer.use_v1): the plugin then patches V1's rollout dump (v1_dump.py).
V1_ENV = "WORKBENCH_VERL_V1"
# Ray puts unix sockets under its temp dir; their paths must stay below ~107 characters.
_MAX_TMP_LEN = 40
# Jinja template that renders the chat as the bare text of its messages: a tokenizer without a
# chat template gets the same prompt text as on the local backend.
PLAIN_CHAT_TEMPLATE = "{% for m in messages %}{{ m.content }}{% endfor %}"


def ray_temp_dir(run_dir: Path, attempt: int) -> str:
    """A short, private temp dir for the attempt's Ray cluster: /tmp/rlhf-ray-<run hash>-<attempt>."""
    digest = hashlib.sha1(str(Path(run_dir).resolve()).encode()).hexdigest()[:10]
    base = tempfile.gettempdir()
    if len(base) > _MAX_TMP_LEN - 25:
        base = "/tmp"
    return os.path.join(base, f"{RAY_TMP_PREFIX}{digest}-{int(attempt)}")


def cpu_env(ray_tmp: str | None = None, use_v1: bool = False) -> dict[str, str]:
    """Environment for main_ppo on CPU (added to the backend's base env).

    `ray_tmp`: the temp dir of the attempt's own Ray cluster; None for a job submitted to an existing
    cluster, whose address and network stay as the cluster has them. `use_v1`: VERL's V1 trainer.
    """
    env = {
        "VERL_USE_EXTERNAL_MODULES": PLUGIN_MODULE,
        "VERL_PLATFORM": "cpu",
        "VERL_ENGINE_DEVICE": "cuda",  # selects VERL's FSDP engine; it runs on gloo here
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_DEDUP_LOGS": "0",
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        **RAY_STARTUP_ENV,  # a busy host starts Ray's processes slowly
    }
    if use_v1:
        env[V1_ENV] = "1"
    if ray_tmp:
        env.update({
            "RAY_ADDRESS": "",  # never join a cluster named by the worker's environment
            # Ray swaps 127.0.0.1 for the host's outward address (and its servers then listen on every
            # interface) unless it is told it runs no multi-node cluster: the private one stays on loopback.
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
            "GLOO_SOCKET_IFNAME": "lo",  # the trainer's collectives stay on loopback
            STORE_DIR_ENV: os.path.join(ray_tmp, "c10d"),
        })
    return env


def cpu_overrides(ray_tmp: str | None, fake_gpus: int = 1, use_v1: bool = False) -> list[tuple[str, Any]]:
    """Overrides that replace or extend the GPU job's list (same keys win, new ones are appended).

    `ray_tmp`: the temp dir of the attempt's private Ray cluster; None for a job submitted to an
    existing cluster, whose nodes each offer the "GPU" (`ray start --num-gpus=1`) the pools count.
    `fake_gpus`: one for the student, plus one for an on-policy distillation teacher's own pool.
    `use_v1`: VERL's V1 trainer (the form's choice); legacy otherwise.
    """
    common: list[tuple[str, Any]] = [
        ("actor_rollout_ref.rollout.name", ROLLOUT_NAME),
        ("actor_rollout_ref.rollout.tensor_model_parallel_size", 1),
        ("actor_rollout_ref.rollout.agent.num_workers", 1),
        ("actor_rollout_ref.rollout.checkpoint_engine.backend", "naive"),
        ("actor_rollout_ref.actor.strategy", "fsdp2"),
        ("actor_rollout_ref.ref.strategy", "fsdp2"),
        ("actor_rollout_ref.actor.use_torch_compile", False),
        ("actor_rollout_ref.actor.fsdp_config.use_torch_compile", False),
        ("actor_rollout_ref.ref.use_torch_compile", False),
        ("actor_rollout_ref.ref.fsdp_config.use_torch_compile", False),
        ("actor_rollout_ref.actor.fsdp_config.dtype", "float32"),
        ("actor_rollout_ref.ref.fsdp_config.dtype", "float32"),
        # VERL's FSDP engine computes in its mixed-precision param dtype, bf16 unless `mixed_precision` names
        # one (fsdp_config.dtype above does not): bf16 autocast on a CPU without bf16 units made SmolLM2's
        # log-prob passes ~5x and its update ~10x slower than the local backend's float32, and the trainer's
        # log-probs drifted from the rollout's (rollout_probs_diff_mean 7e-3).
        *[(f"+actor_rollout_ref.{role}.fsdp_config.mixed_precision.{part}_dtype", "fp32")
          for role in ("actor", "ref") for part in ("param", "reduce", "buffer")],
        # The local backend keeps the activations (a CPU step's batch is small); recomputing them in the
        # backward pass is one more forward per update.
        ("actor_rollout_ref.model.enable_gradient_checkpointing", False),
        # Offloading pins host memory, which needs an accelerator; on CPU the weights are home already.
        ("actor_rollout_ref.actor.fsdp_config.param_offload", False),
        ("actor_rollout_ref.actor.fsdp_config.optimizer_offload", False),
        ("actor_rollout_ref.ref.fsdp_config.param_offload", False),
        ("actor_rollout_ref.model.use_remove_padding", False),  # flash-attn varlen kernels are CUDA-only
        ("+actor_rollout_ref.model.override_config.attn_implementation", "eager"),
        ("data.dataloader_num_workers", 0),
        ("reward.num_workers", 1),
        ("trainer.device", "cpu"),
        ("trainer.n_gpus_per_node", 1),
        ("trainer.use_v1", use_v1),
    ]
    if use_v1:
        # TransferQueue starts one Ray actor per storage unit, each holding a logical CPU for its
        # lifetime; its default 8 units plus the controller need more than the private cluster's
        # slots, and V1 waits for all of them forever. One unit serves a one-node rehearsal.
        common.append(("transfer_queue.backend.SimpleStorage.num_data_storage_units", 1))
    if ray_tmp is None:
        return common
    return common + [
        ("trainer.nnodes", 1),
        ("+ray_kwargs.ray_init.address", "local"),
        ("ray_kwargs.ray_init.num_cpus", 8),  # logical slots for VERL's actors, not cores
        ("+ray_kwargs.ray_init.num_gpus", fake_gpus),  # the platform's "GPU" resource (see platform.py)
        ("+ray_kwargs.ray_init.include_dashboard", False),
        ("+ray_kwargs.ray_init._temp_dir", ray_tmp),
    ]
