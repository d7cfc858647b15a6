"""Loaded by VERL in every process of a CPU run: `VERL_USE_EXTERNAL_MODULES=training.verl_cpu.plugin`.

`import verl` imports the listed modules right after its own initialisation, so the driver, the
TaskRunner, the workers and the rollout servers all get the same three kinds of change:

1. the `cpu` platform (training.verl_cpu.platform), selected by VERL_PLATFORM=cpu;
2. `rollout.name=hf` in VERL's two rollout registries (training.verl_cpu.rollout);
3. four patches:
   - VERL asks torch for the process-group backend "cpu:gloo,cpu:gloo" (one entry for CPU tensors,
     one for the device), which torch rejects as a duplicate; it becomes "cpu:gloo". On the
     attempt's private cluster the ranks meet in a file store instead of torch's TCPStore, which
     listens on every interface;
   - VERL picks the rollout's token builder from config.json's model_type alone, so a tiny Qwen2
     with a character tokenizer (no ChatML `<|im_end|>`, no newline token) gets Qwen's builder,
     which refuses it; such a tokenizer falls back to VERL's default builder. Qwen's rules only
     join multi-turn context, which a single-turn GRPO rollout never does;
   - VERL's FSDP2 engine always wraps the reference policy in `CPUOffloadPolicy(pin_memory=True)`,
     and pinning host memory needs an accelerator; on CPU the policy never pins;
   - with trl installed (the benchmarks install it), VERL imports trl's `AutoModelForCausalLMWithValueHead`
     to patch it, and trl 1.x no longer has that class; VERL then skips its trl patch (it only matters
     for PPO value heads, which GRPO does not use).

In a V1 run (trainer.use_v1=true) the rollout dump also keeps the reward's columns and the group uids
(training.verl_cpu.v1_dump). Either trainer writes each rollout dump's summary beside it
(training.verl_cpu.rollout_summary).

Ray's driver gets a longer wait for its new raylet on a busy machine, and the raylet its agents' ports up front
(training.verl_cpu.ray_startup).

No VERL file is edited; the registries and method names used here are VERL 0.9.1's (pinned).
"""
from __future__ import annotations

import os
from typing import Any

os.environ.setdefault("VERL_PLATFORM", "cpu")
# VERL registers its FSDP engines for the devices "cuda" and "npu" only; FSDP2 itself runs on gloo.
os.environ.setdefault("VERL_ENGINE_DEVICE", "cuda")

import torch.distributed as dist  # noqa: E402
from torch.distributed.fsdp import CPUOffloadPolicy  # noqa: E402
from verl.utils.tokenizer import continuous_token_wiring as ct_wiring  # noqa: E402
from verl.workers.rollout import base as rollout_base  # noqa: E402
from verl.workers.rollout.replica import RolloutReplicaRegistry  # noqa: E402

from training.verl_cpu import ROLLOUT_NAME, STORE_DIR_ENV, V1_ENV, rollout_summary  # noqa: E402
from training.verl_cpu import platform as _platform  # noqa: E402,F401 - registers the platform
from training.verl_cpu.ray_startup import agent_ports_up_front, patient_node_lookup  # noqa: E402


def _load_replica() -> type:
    from training.verl_cpu.rollout import HFReplica

    return HFReplica


RolloutReplicaRegistry.register(ROLLOUT_NAME, _load_replica)
rollout_base._ROLLOUT_REGISTRY[(ROLLOUT_NAME, "async")] = "training.verl_cpu.rollout.HFServerAdapter"


def dedupe_backend(backend: Any) -> Any:
    """"cpu:gloo,cpu:gloo" -> "cpu:gloo"; any other backend string is returned unchanged."""
    if not isinstance(backend, str) or "," not in backend:
        return backend
    parts = list(dict.fromkeys(p for p in backend.split(",") if p))
    devices = [p.split(":")[0] for p in parts]
    if len(set(devices)) < len(devices):
        parts = [p for p in parts if p.startswith("cpu:")][:1] or parts[:1]
    return ",".join(parts)


_original_init_process_group = dist.init_process_group


def private_rendezvous(kwargs: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    """`kwargs` for init_process_group with a file store in STORE_DIR_ENV's folder instead of env://.

    torch's TCPStore listens on every interface; on the private cluster (one machine) a file store
    in the attempt's own folder joins the ranks without a socket. Other calls are left alone.
    """
    folder = env.get(STORE_DIR_ENV)
    if not folder or kwargs.get("store") is not None or kwargs.get("init_method") not in (None, "env://"):
        return kwargs
    if not all(k in env for k in ("RANK", "WORLD_SIZE", "MASTER_PORT")):
        return kwargs
    os.makedirs(folder, exist_ok=True)
    rank, world_size = kwargs.get("rank", -1), kwargs.get("world_size", -1)
    return {**kwargs, "init_method": f"file://{folder}/c10d-{env['MASTER_PORT']}",
            "rank": int(env["RANK"]) if rank == -1 else rank,
            "world_size": int(env["WORLD_SIZE"]) if world_size == -1 else world_size}


def _init_process_group(*args: Any, **kwargs: Any) -> Any:
    if args:
        args = (dedupe_backend(args[0]), *args[1:])
    elif "backend" in kwargs:
        kwargs["backend"] = dedupe_backend(kwargs["backend"])
    return _original_init_process_group(*args, **private_rendezvous(kwargs, dict(os.environ)))


if not getattr(dist.init_process_group, "_dedupes_backend", False):  # import once per process
    _init_process_group._dedupes_backend = True  # type: ignore[attr-defined]
    dist.init_process_group = _init_process_group


_original_create_builder = ct_wiring.create_continuous_token_builder


def _create_builder(tokenizer: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return _original_create_builder(tokenizer, *args, **kwargs)
    except ValueError:
        if kwargs.get("processor") is not None or kwargs.get("model_family", "auto") != "auto":
            raise
        kwargs["model_family"] = ct_wiring.ContinuousTokenModelFamily.DEFAULT
        return _original_create_builder(tokenizer, *args, **kwargs)


# Before verl.experimental.agent_loop imports the name (it is imported later, by the workers).
ct_wiring.create_continuous_token_builder = _create_builder


_original_offload_init = CPUOffloadPolicy.__init__


def _offload_init(self: CPUOffloadPolicy, pin_memory: bool = True) -> None:
    _original_offload_init(self, pin_memory=False)


if not getattr(CPUOffloadPolicy.__init__, "_never_pins", False):
    _offload_init._never_pins = True  # type: ignore[attr-defined]
    CPUOffloadPolicy.__init__ = _offload_init  # type: ignore[method-assign]


def trl_has_value_head() -> bool:
    """Whether the installed trl (if any) still has the class VERL patches."""
    try:
        import trl
    except ImportError:
        return False
    if hasattr(trl, "AutoModelForCausalLMWithValueHead"):
        return True
    try:
        from trl.experimental.ppo import AutoModelForCausalLMWithValueHead  # noqa: F401
    except ImportError:
        return False
    return True


if not trl_has_value_head():
    from verl.models.transformers import monkey_patch as _monkey_patch  # noqa: E402
    from verl.utils import model as _verl_model  # noqa: E402

    _monkey_patch.is_trl_available = lambda: False
    _verl_model.is_trl_available = lambda: False


patient_node_lookup()
agent_ports_up_front()
rollout_summary.install()  # each rollout dump gets its summary, for the web app's sync

if os.environ.get(V1_ENV) == "1":  # the plan sets it for a V1 run; Ray's processes inherit it
    from training.verl_cpu import v1_dump as _v1_dump  # noqa: E402,F401 - the rollout store's columns
