"""`rollout.name=hf`: VERL's async rollout served by a plain Hugging Face model on CPU.

VERL 0.9.1 always rolls out through an async server (vLLM, SGLang or TRT-LLM, all CUDA builds).
This module adds a third kind of server for CPU-only machines:

- `HFServer`, a Ray actor that samples token-in/token-out with `transformers`;
- `HFReplica`, the `RolloutReplica` that starts one server per replica (also as a distillation
  teacher: the server then scores the student's sequences, `prompt_logprobs`, as vLLM does);
- `HFServerAdapter`, the `BaseRollout` inside VERL's hybrid actor worker that pushes the
  trainer's weights to the server after each update (`checkpoint_engine.backend=naive`).

VERL's `training/rollout_probs_diff_max` metric compares the server's sampling log-probs with the
trainer's: it stays near 1e-4 only while the weights really are in sync.
"""
from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable
from typing import Any

import ray
import torch
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica, TokenOutput

from training.verl_cpu.batch_decode import Request, sample_batch, sampling_key

# Env vars every Ray process of the run needs to import this plugin again.
PLUGIN_ENV = ("VERL_USE_EXTERNAL_MODULES", "PYTHONPATH", "VERL_PLATFORM", "VERL_ENGINE_DEVICE")


# Sampling requests decoded together: at most MAX_BATCH, gathered until none has arrived for GATHER_QUIET_S
# (at most GATHER_MAX_S); a step's decoding takes seconds, so the wait costs little.
MAX_BATCH = 64
GATHER_QUIET_S = 0.05
GATHER_MAX_S = 2.0


def server_name(replica_rank: int, suffix: str = "") -> str:
    return f"hf_server_{replica_rank}{suffix}"


class HFServer:
    """Generation server backed by an eager HF model in float32 (runs as a Ray actor)."""

    def __init__(self, config: Any, model_config: Any, replica_rank: int) -> None:
        from verl.utils.config import omega_conf_to_dataclass
        from verl.workers.config import HFModelConfig

        self.config = omega_conf_to_dataclass(config)
        self.model_config = omega_conf_to_dataclass(model_config, dataclass_type=HFModelConfig)
        self.replica_rank = replica_rank
        self.global_steps: int | None = None
        self.model: Any = None
        self.eos_ids: set[int] = set()
        self._lock = asyncio.Lock()  # one generation or weight update at a time
        self._pending: list[tuple[Request, asyncio.Future]] = []
        self._drainer: asyncio.Task | None = None

    async def init(self) -> bool:
        from transformers import AutoModelForCausalLM

        torch.set_num_threads(int(os.environ.get("VERL_CPU_ROLLOUT_THREADS", "1")))
        self.model = AutoModelForCausalLM.from_pretrained(self.model_config.local_path, dtype=torch.float32,
                                                          attn_implementation="eager")
        self.model.eval()
        tok = self.model_config.tokenizer
        gen = self.model_config.generation_config
        eos = gen.eos_token_id if gen is not None and gen.eos_token_id is not None else tok.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, list) else [eos]) | {tok.eos_token_id}
        self.eos_ids.discard(None)
        return True

    async def update_weights(self, state_dict: dict[str, torch.Tensor], global_steps: int | None = None) -> int:
        async with self._lock:
            missing, _unexpected = self.model.load_state_dict(state_dict, strict=False)
            self.global_steps = global_steps
        # Tied embeddings arrive once; anything else missing means the sync is broken.
        missing = [k for k in missing if k != "lm_head.weight"]
        if missing:
            raise RuntimeError(f"weight sync left {len(missing)} tensors stale, e.g. {missing[:3]}")
        return len(state_dict)

    def _max_tokens(self, params: dict[str, Any], prompt_len: int) -> int:
        limit = self.config.max_model_len - prompt_len if self.config.max_model_len else 10**9
        wanted = params.pop("max_tokens", None) or params.pop("max_new_tokens", None)
        if wanted is None:
            wanted = min(self.config.response_length,
                         self.config.prompt_length + self.config.response_length - prompt_len)
        return max(1, min(int(wanted), limit))

    @torch.no_grad()
    def _prompt_logprobs(self, ids: list[int], k: int) -> tuple[list[list[int]], list[list[float]]]:
        """Per position i >= 1: the log-prob of ids[i] (k == 0) or the top-k (ids, log-probs) after
        ids[:i]; then one dummy row for the last position. vLLM's layout (extract_prompt_logprobs)."""
        logps = torch.log_softmax(self.model(input_ids=torch.tensor([ids])).logits[0].float(), dim=-1)
        logps[:, len(self.model_config.tokenizer):] = -float("inf")
        if k == 0:
            target = torch.tensor(ids[1:])
            rows_ids = [[t] for t in ids[1:]]
            rows_lp = [[v] for v in logps[:-1].gather(1, target[:, None])[:, 0].tolist()]
        else:
            top = torch.topk(logps[:-1], k, dim=-1)
            rows_ids, rows_lp = top.indices.tolist(), top.values.tolist()
        width = max(k, 1)
        return rows_ids + [[0] * width], rows_lp + [[0.0] * width]

    async def generate(self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str,
                       **_kwargs: Any) -> TokenOutput:
        params = dict(sampling_params)
        prompt_ids = list(prompt_ids)
        if params.get("prompt_logprobs") is not None:  # a distillation teacher scoring a sequence
            async with self._lock:
                ids, logps = self._prompt_logprobs(prompt_ids, int(params["prompt_logprobs"]))
            return TokenOutput(token_ids=[], log_probs=None, stop_reason="length",
                               extra_fields={"prompt_ids": ids, "prompt_logprobs": logps})
        request = Request(prompt_ids, self._max_tokens(params, len(prompt_ids)), params)
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        self._pending.append((request, future))
        if self._drainer is None or self._drainer.done():
            self._drainer = asyncio.create_task(self._drain())
        tokens, logps, stop = await future
        return TokenOutput(token_ids=tokens, log_probs=logps if params.get("logprobs") else None,
                           stop_reason=stop, extra_fields={"global_steps": self.global_steps})

    async def _drain(self) -> None:
        """Decode the waiting requests in batches until none is left (see batch_decode)."""
        loop = asyncio.get_running_loop()
        while self._pending:
            # The agent loop sends a step's samples one request each: wait until they stop arriving.
            deadline, seen = loop.time() + GATHER_MAX_S, -1
            while seen != len(self._pending) and len(self._pending) < MAX_BATCH and loop.time() < deadline:
                seen = len(self._pending)
                await asyncio.sleep(GATHER_QUIET_S)
            key = sampling_key(self._pending[0][0].params)
            batch = [p for p in self._pending if sampling_key(p[0].params) == key][:MAX_BATCH]
            self._pending = [p for p in self._pending if all(p is not q for q in batch)]
            try:
                async with self._lock:
                    results = sample_batch(self.model, [r for r, _ in batch], len(self.model_config.tokenizer),
                                           self.eos_ids)
            except Exception as exc:  # every waiting sample of the batch gets the error, none hangs
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            for (_, future), result in zip(batch, results, strict=True):
                if not future.done():
                    future.set_result(result)
            await asyncio.sleep(0)

    # Control plane: a CPU model has no KV cache or memory to release between phases.
    async def abort_all_requests(self, reject_request: bool = False) -> dict[str, Any]:
        return {"aborted_count": 0, "request_ids": []}

    async def abort_request(self, request_id: str) -> dict[str, Any]:
        return {"aborted": False, "request_id": request_id}

    async def _nothing(self, *_args: Any, **_kwargs: Any) -> None:
        return None

    wake_up = sleep = resume_generation = clear_kv_cache = release_kv_cache = resume_kv_cache = _nothing
    start_profile = stop_profile = wait_for_requests_to_drain = _nothing


class HFReplica(RolloutReplica):
    """One `HFServer` per replica; it takes no Ray CPU so it fits next to the fused workers."""

    async def launch_servers(self) -> None:
        name = server_name(self.replica_rank, self.name_suffix)
        env = {k: os.environ[k] for k in PLUGIN_ENV if k in os.environ}
        server = ray.remote(HFServer).options(
            name=name, num_cpus=0, max_concurrency=self.max_concurrency, runtime_env={"env_vars": env},
        ).remote(config=self.config, model_config=self.model_config, replica_rank=self.replica_rank)
        await server.init.remote()
        self.servers = [server]
        self._server_handle = server
        self._server_address = f"hf-local:{name}"

    async def init_colocated(self, resource_pool: Any) -> None:
        # A teacher replica gets its own pool; the server needs no worker group inside it.
        self.resource_pool = resource_pool
        await self.launch_servers()

    def rollout_worker_use_gpu(self) -> bool:
        return False


class HFServerAdapter(BaseRollout):
    """Lives in the hybrid ActorRolloutRefWorker; sends the updated weights to its replica's server."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, model_config, device_mesh)
        rank = int(os.environ.get("RANK", "0"))
        size = (self.config.tensor_model_parallel_size * self.config.data_parallel_size
                * self.config.pipeline_model_parallel_size)
        self.replica_rank, self.rollout_rank = divmod(rank, size)
        self._server: Any = None

    async def resume(self, tags: list[str]) -> None:
        return None

    async def release(self) -> None:
        return None

    async def update_weights(self, weights: Iterable[tuple[str, Any]], wire_format: str = "named_tensors",
                             **kwargs: Any) -> None:
        state = {}
        for name, tensor in weights:
            if hasattr(tensor, "full_tensor"):  # an FSDP2 DTensor shard: every rank must join the gather
                tensor = tensor.full_tensor()
            state[name] = tensor.detach().to("cpu", dtype=torch.float32).clone()
        if self.rollout_rank != 0:
            return
        if self._server is None:
            self._server = ray.get_actor(server_name(self.replica_rank))
        await self._server.update_weights.remote(state, kwargs.get("global_steps"))
