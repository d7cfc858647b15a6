"""The checks between settings that only VERL jobs have (strategy x rollout engine x device, GPUs, LoRA on vLLM),
run by `training.hparams.resolve_config` for a VERL job. Pure Python, no Django."""
from __future__ import annotations

from training.settings_table import GPU_ENGINES, MAX_LORA_RANK


def _err(errors: dict, key: str, message: str) -> None:  # the first refusal of a setting stands
    errors.setdefault(key, message)


def check_verl(kind: str, hp: dict, verl: dict, errors: dict, warnings: dict, ok) -> None:
    """The checks between settings that only a VERL job has; `ok(*keys)` is False when one of them was refused."""
    if kind == "reward_model":
        _err(errors, "backend", "Reward-model training runs on the local backend; VERL trains policies.")
    if kind == "distill" and ok("distill_mode") and hp["distill_mode"] != "on_policy":
        _err(errors, "distill_mode", "VERL only does on-policy distillation: choose on_policy, or the local backend.")
    _engines(hp, verl, errors, warnings, ok)
    if ok("verl.tensor_model_parallel_size", "verl.n_gpus_per_node") and verl["tensor_model_parallel_size"] >= 1 \
            and verl["n_gpus_per_node"] % verl["tensor_model_parallel_size"]:
        _err(errors, "verl.tensor_model_parallel_size",
             f"Tensor parallel size {verl['tensor_model_parallel_size']} must divide the "
             f"{verl['n_gpus_per_node']} GPUs per node.")
    if kind == "distill" and ok("verl.n_gpus_per_node", "device") and hp["device"] != "cpu" \
            and verl["n_gpus_per_node"] < 2:
        _err(errors, "verl.n_gpus_per_node", "On-policy distillation on VERL needs at least 2 GPUs per node "
                                             "(one pool for the student, one for the teacher).")
    if ok("lora.rank") and (hp.get("lora") or {}).get("rank", 0) > MAX_LORA_RANK:
        _err(errors, "lora.rank", f"vLLM accepts LoRA ranks up to {MAX_LORA_RANK}.")
    if ok("device", "verl.reuse_rollout_logprobs") and verl.get("reuse_rollout_logprobs") and hp["device"] != "cpu":
        warnings["verl.reuse_rollout_logprobs"] = (
            "The GPU rollout samples with its own engine and precision: its log-probs are not the trainer's, so "
            "reusing them as the old policy's makes the update off-policy by that gap (VERL's bypass mode).")
    if kind == "distill" and ok("device", "distill_loss") and hp["device"] == "cpu" \
            and hp.get("distill_loss") == "forward_kl_topk":
        _err(errors, "distill_loss", "The top-k forward KL needs the teacher's top-k log-probs, which VERL takes "
                                     "only from vLLM or SGLang (GPU). On CPU choose a per-token loss: k3, "
                                     "low_var_kl, k2, mse or abs.")


def _engines(hp: dict, verl: dict, errors: dict, warnings: dict, ok) -> None:
    """Strategy × rollout engine × device: what VERL can run where."""
    if not ok("device", "verl.strategy", "verl.rollout_engine"):
        return
    device, strategy, engine = hp["device"], verl["strategy"], verl["rollout_engine"]
    names = {"vllm": "vLLM", "sglang": "SGLang"}
    rank = (hp.get("lora") or {}).get("rank", 0)
    if strategy == "megatron" and ok("lora.rank") and rank > 0:
        _err(errors, "lora.rank", "LoRA here names Hugging Face modules, which Megatron does not use: set the rank "
                                  "to 0 for Megatron, or choose FSDP/FSDP2 for LoRA.")
    if device == "cpu":
        # VERL's trainer on CPU (training.verl_cpu): a rehearsal with a tiny model on one machine.
        if ok("lora.rank") and rank > 0:
            _err(errors, "lora.rank", "LoRA needs a GPU on VERL: the CPU rollout syncs full weights only. "
                                      "Set the rank to 0 to rehearse on CPU.")
        if ok("verl.nnodes") and verl["nnodes"] != 1:
            warnings["verl.nnodes"] = (f"{verl['nnodes']} nodes on CPU: the job goes to the Ray cluster named by the "
                                       "worker's RAY_ADDRESS, one data-parallel worker per node (gloo).")
        if strategy == "megatron":
            _err(errors, "verl.strategy", "Megatron needs GPUs: on device cpu choose FSDP2, or set device to cuda.")
        elif strategy != "fsdp2":
            _err(errors, "verl.strategy", "VERL trains on CPU with FSDP2 (gloo): choose fsdp2, or set device to cuda.")
        if engine in GPU_ENGINES:
            _err(errors, "verl.rollout_engine", f"{names[engine]} needs CUDA GPUs: on device cpu choose the CPU "
                                                "rollout (hf), or set device to cuda.")
    elif engine == "hf":
        _err(errors, "verl.rollout_engine", "The CPU rollout (hf) runs only with device cpu: choose vLLM or SGLang "
                                            "for GPU workers, or set device to cpu.")
