#!/usr/bin/env python3
"""Torch-level CUDA check for a GPU host, without verl, ray or vLLM.

    python scripts/gpu_torch_check.py [--out result.json] [--device cuda|cpu] [--small]

1. Device facts: name, capability, memory, torch/CUDA versions, bf16 support.
2. The tiny model (training.models.build_tiny_model when the repo is importable, else the same
   shape built here): bf16 forward/backward, finite loss and grads, and a few AdamW steps on a
   fixed batch must lower the loss.
3. A Qwen2.5-0.5B-shaped Qwen2 built on the spot from its config (random weights, nothing
   downloaded): bf16 training step throughput (tokens/s), KV-cache generation throughput, and
   peak memory.
`--small` shrinks everything so the script itself can be tested on a CPU in seconds.
Prints one JSON object; exits 1 if a check failed.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo, for training.models

# Qwen2.5-0.5B's published shape (config.json of Qwen/Qwen2.5-0.5B), written out so nothing is fetched.
QWEN05_SHAPE = {"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
                    "num_key_value_heads": 2, "vocab_size": 151936, "max_position_embeddings": 4096,
                    "tie_word_embeddings": True, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6}
SMALL_SHAPE = {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 2,
                   "num_key_value_heads": 1, "vocab_size": 1024, "max_position_embeddings": 512,
                   "tie_word_embeddings": True}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def device_facts(device: torch.device) -> dict[str, Any]:
    facts: dict[str, Any] = {"torch": torch.__version__, "python": platform.python_version(),
                             "device": str(device)}
    try:
        import transformers

        facts["transformers"] = transformers.__version__
    except ImportError:
        facts["transformers"] = None
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        facts.update(name=props.name, capability=f"{props.major}.{props.minor}",
                     total_memory_gib=round(props.total_memory / 2**30, 1), cuda=torch.version.cuda,
                     bf16_supported=torch.cuda.is_bf16_supported(), device_count=torch.cuda.device_count())
    return facts


def tiny_model(device: torch.device, dtype: torch.dtype, tmp: Path):
    """The repo's tiny model when importable (same code the local trainer uses), else its shape."""
    try:
        from transformers import AutoModelForCausalLM

        from training.models import build_tiny_model

        source = "training.models.build_tiny_model"
        model = AutoModelForCausalLM.from_pretrained(build_tiny_model(tmp / "tiny"), dtype=dtype)
    except ImportError:
        from transformers import Qwen2Config, Qwen2ForCausalLM

        source = "inline Qwen2 (h64, L2)"
        torch.manual_seed(0)
        model = Qwen2ForCausalLM(Qwen2Config(vocab_size=104, hidden_size=64, intermediate_size=128,
                                             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                             max_position_embeddings=256, tie_word_embeddings=True)).to(dtype)
    return model.to(device), source


def check_tiny(device: torch.device, dtype: torch.dtype, steps: int) -> dict[str, Any]:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        model, source = tiny_model(device, dtype, Path(tmp))
    torch.manual_seed(0)
    vocab = model.config.vocab_size
    batch = torch.randint(4, vocab, (8, 32), device=device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(steps):
        loss = model(input_ids=batch, labels=batch).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        grads_finite = all(torch.isfinite(p.grad).all().item() for p in model.parameters() if p.grad is not None)
        opt.step()
        losses.append(float(loss.detach()))
    ok = all(math.isfinite(x) for x in losses) and grads_finite and losses[-1] < losses[0]
    return {"ok": ok, "source": source, "dtype": str(dtype), "params": sum(p.numel() for p in model.parameters()),
            "loss_first": round(losses[0], 4), "loss_last": round(losses[-1], 4), "grads_finite": grads_finite}


def check_qwen_shaped(device: torch.device, dtype: torch.dtype, small: bool, seq: int, batch: int,
                      gen_batch: int, new_tokens: int, iters: int) -> dict[str, Any]:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(**(SMALL_SHAPE if small else QWEN05_SHAPE))
    torch.manual_seed(0)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    t0 = time.perf_counter()
    with torch.device(device):
        model = Qwen2ForCausalLM(cfg).to(dtype)
    sync(device)
    out: dict[str, Any] = {"shape": "small" if small else "Qwen2.5-0.5B", "dtype": str(dtype),
                           "params_m": round(sum(p.numel() for p in model.parameters()) / 1e6, 1),
                           "build_s": round(time.perf_counter() - t0, 2),
                           "attn_implementation": getattr(model.config, "_attn_implementation", None)}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=device.type == "cuda")
    model.config.use_cache = False  # training: no KV cache (and gradient checkpointing refuses one)
    model.gradient_checkpointing_enable()
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), device=device)
    times, losses = [], []
    for i in range(iters + 1):  # the first iteration warms up kernels and is not timed
        sync(device)
        t = time.perf_counter()
        loss = model(input_ids=ids, labels=ids).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sync(device)
        if i:
            times.append(time.perf_counter() - t)
        losses.append(float(loss.detach()))
    step_s = sum(times) / len(times)
    out.update(train_batch=batch, train_seq=seq, train_step_s=round(step_s, 4),
               train_tokens_per_s=round(batch * seq / step_s), train_loss=[round(x, 3) for x in losses],
               train_finite=all(math.isfinite(x) for x in losses))
    model.gradient_checkpointing_disable()
    model.config.use_cache = True
    model.eval()
    prompt = torch.randint(0, cfg.vocab_size, (gen_batch, 64), device=device)
    with torch.no_grad():
        model.generate(prompt, max_new_tokens=4, do_sample=False, pad_token_id=0)  # warm-up
        sync(device)
        t = time.perf_counter()
        gen = model.generate(prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=True,
                             temperature=1.0, pad_token_id=0)
        sync(device)
    gen_s = time.perf_counter() - t
    produced = (gen.shape[1] - prompt.shape[1]) * gen_batch
    out.update(gen_batch=gen_batch, gen_new_tokens=new_tokens, gen_s=round(gen_s, 3),
               gen_tokens_per_s=round(produced / gen_s))
    if device.type == "cuda":
        out["peak_memory_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
    out["ok"] = out["train_finite"] and produced == new_tokens * gen_batch
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--small", action="store_true", help="tiny shapes (for testing the script on a CPU)")
    ap.add_argument("--out", type=Path, help="also write the JSON here (default: $OUT/gpu_torch_check.json if set)")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print(json.dumps({"ok": False, "error": "no CUDA device visible"}))
        return 1
    if device.type == "cpu":
        torch.set_num_threads(min(2, os.cpu_count() or 1))
    dtype = torch.bfloat16 if (device.type == "cpu" or torch.cuda.is_bf16_supported()) else torch.float16
    result: dict[str, Any] = {"facts": device_facts(device)}
    t0 = time.perf_counter()
    try:
        result["tiny"] = check_tiny(device, dtype, steps=20 if args.small else 30)
        if args.small:
            result["qwen"] = check_qwen_shaped(device, dtype, True, seq=64, batch=2, gen_batch=2,
                                               new_tokens=8, iters=1)
        else:
            result["qwen"] = check_qwen_shaped(device, dtype, False, seq=1024, batch=8, gen_batch=32,
                                               new_tokens=128, iters=3)
    except Exception as exc:  # noqa: BLE001 - reported in the JSON, with the exit code
        result["error"] = f"{type(exc).__name__}: {exc}"
    result["wall_s"] = round(time.perf_counter() - t0, 1)
    result["ok"] = "error" not in result and result["tiny"]["ok"] and result["qwen"]["ok"]
    text = json.dumps(result, indent=2)
    print(text)
    out = args.out or (Path(os.environ["OUT"]) / "gpu_torch_check.json" if os.environ.get("OUT") else None)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
