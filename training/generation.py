"""One generation interface for evaluations, the arena and judges: vLLM where the worker has it, else transformers.

    gen = load_generator("runs/p/7-ab/checkpoints/global_step_40", base_model="models/demo-tiny")
    [[g0, g1], ...] = gen.generate(["1+2=", ...], n=2, max_response_length=8, temperature=1.0, seed=7)
    g0.text, g0.token_ids, g0.finish_reason ("stop" | "length"), g0.truncated

`model_path` is an HF folder, a LoRA adapter folder, or a checkpoint folder (`global_step_N` of the local
backend or VERL; `base_model` gives the tokenizer and the base of a LoRA adapter).
engine "auto" = vLLM when it imports and a CUDA device exists, else transformers.

Sampling: temperature 0 is greedy. With a `seed`, prompt i of a call is sampled from its own random
generator seeded with `seed + i`, so `generate([p_i], seed=seed + i)` gives prompt i's samples again,
whatever batch it sat in (vLLM: a per-request seed; transformers: a per-row sampler, below).
Training-time rollouts that need tensors (log-probs) stay in `training.local.common.rollout`.
"""
from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENGINES = ("auto", "vllm", "transformers")


class GenerationError(ValueError):
    """A model path or request the generator refuses; the message says why."""


@dataclass(frozen=True)
class Generation:
    text: str
    token_ids: list[int]
    finish_reason: str  # "stop" (an end-of-sequence token) or "length" (max_response_length reached)
    truncated: bool

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "token_ids": list(self.token_ids), "finish_reason": self.finish_reason,
                "truncated": self.truncated}


class Generator:
    """The interface; `load_generator` returns one of the engines below."""

    engine = "none"
    tok: Any = None  # the tokenizer (Hugging Face API): render and count prompts with it
    workdir: Path | None = None  # a merged copy of the model (VERL checkpoints), removed by close()

    def generate(self, prompts: list[str | list[dict]], *, n: int = 1, max_response_length: int = 128,
                 temperature: float = 1.0, top_p: float = 1.0, seed: int | None = None) -> list[list[Generation]]:
        raise NotImplementedError

    def close(self) -> None:
        """Free the model (and any merged copy on disk)."""
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    def __enter__(self) -> Generator:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def check_request(prompts: list, n: int, max_response_length: int, temperature: float, top_p: float) -> None:
    if not isinstance(prompts, list):
        raise GenerationError("prompts must be a list of strings or of message lists")
    if int(n) < 1:
        raise GenerationError(f"n must be at least 1, not {n}")
    if int(max_response_length) < 1:
        raise GenerationError(f"max_response_length must be at least 1, not {max_response_length}")
    if float(temperature) < 0:
        raise GenerationError(f"temperature must be 0 (greedy) or more, not {temperature}")
    if not 0 < float(top_p) <= 1:
        raise GenerationError(f"top_p must be in (0, 1], not {top_p}")


def render(prompt: str | list[dict], tok) -> str:
    """A prompt string, or a message list through the tokenizer's chat template (plain roles if it has none)."""
    from training.local.data import render_prompt

    if not isinstance(prompt, (str, list)):
        raise GenerationError(f"a prompt must be a string or a list of messages, not {type(prompt).__name__}")
    return render_prompt(prompt, tok)


# --- model folders -----------------------------------------------------------------------------------------

def checkpoint_format(ckpt: Path) -> str:
    try:
        fmt = json.loads((ckpt / "manifest.json").read_text()).get("format")
        if fmt:
            return str(fmt)
    except (OSError, ValueError):
        pass
    if (ckpt / "model").is_dir():
        return "local"
    if (ckpt / "actor").is_dir():
        return "verl"
    raise GenerationError(f"{ckpt} holds neither model/ (local backend) nor actor/ (VERL): not a checkpoint")


def is_checkpoint(path: Path) -> bool:
    return (path / "manifest.json").is_file() or (path / "model").is_dir() or (path / "actor").is_dir()


def resolve_model(path: str | Path, base_model: str | Path | None, workdir: Path) -> tuple[Path, Path | None, Path]:
    """(weights folder, LoRA adapter or None, tokenizer folder) of an HF folder, adapter or checkpoint.

    A VERL checkpoint is merged to an HF folder under `workdir` first (its LoRA adapter stays separate).
    """
    from training.checkpoints import export_hf

    path = Path(path)
    base = Path(base_model) if base_model else None
    if not path.is_dir():
        raise GenerationError(f"model folder {path} does not exist")
    if is_checkpoint(path):
        if checkpoint_format(path) == "verl":
            folder = export_hf(path, workdir / "hf", merge_lora=True)
            adapter = folder / "lora_adapter"
            return folder, adapter if adapter.is_dir() else None, folder
        path = path / "model"
    if (path / "adapter_config.json").exists():
        if base is None:
            try:
                base = Path(json.loads((path / "adapter_config.json").read_text())["base_model_name_or_path"])
            except (OSError, ValueError, KeyError, TypeError):
                base = None
        if base is None or not (base / "config.json").exists():
            raise GenerationError(f"{path} is a LoRA adapter: give base_model, the HF folder it was trained on")
        return base, path, base
    if not (path / "config.json").exists():
        raise GenerationError(f"{path} is not an HF model folder (config.json missing) or a LoRA adapter")
    has_tok = (path / "tokenizer.json").exists() or (path / "tokenizer_config.json").exists()
    tok_dir = base if base is not None and (base / "config.json").exists() else path
    if base is None and not has_tok:
        raise GenerationError(f"{path} has no tokenizer: give base_model, the run's base model folder")
    return path, None, tok_dir


# --- choosing an engine ------------------------------------------------------------------------------------

def vllm_available() -> bool:
    try:
        import torch
        import vllm  # noqa: F401
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def choose_engine(engine: str = "auto", device: str = "auto") -> str:
    if engine not in ENGINES:
        raise GenerationError(f"engine must be one of {', '.join(ENGINES)}, not {engine!r}")
    if engine == "auto":
        return "vllm" if device != "cpu" and vllm_available() else "transformers"
    if engine == "vllm" and not vllm_available():
        raise GenerationError("engine 'vllm' needs the vllm package and a CUDA device on this worker")
    return engine


def load_generator(model_path: str | Path, *, engine: str = "auto", device: str = "auto", dtype: str = "auto",
                   base_model: str | Path | None = None, batch_size: int = 32) -> Generator:
    """A Generator over `model_path` (HF folder, LoRA adapter or checkpoint); see the module notes."""
    chosen = choose_engine(engine, device)
    workdir = Path(tempfile.mkdtemp(prefix="gen-"))
    try:
        weights, adapter, tok_dir = resolve_model(model_path, base_model, workdir)
        if chosen == "vllm":
            from training.generation_vllm import VLLMGenerator

            gen: Generator = VLLMGenerator(weights, tok_dir, adapter=adapter, dtype=dtype)
        else:
            from training.generation_hf import TransformersGenerator
            from training.models import load_model_and_tokenizer, load_tokenizer, resolve_device

            try:
                dev = resolve_device(device)
            except ValueError as exc:
                raise GenerationError(str(exc)) from None
            model, _ = load_model_and_tokenizer(weights, dev, dtype if dev.type != "cpu" else "float32",
                                                adapter_path=adapter)
            if dev.type == "cpu":
                from training.local.common import set_threads

                set_threads(model)  # one thread for tiny models: much faster on busy shared cores
            gen = TransformersGenerator(model.eval(), load_tokenizer(tok_dir), batch_size=batch_size)
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    gen.workdir = workdir
    return gen
