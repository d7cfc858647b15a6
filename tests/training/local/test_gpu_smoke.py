"""CUDA smoke check of the local trainers (bf16 autocast over fp32 weights). Skipped without a GPU.

Runs without VERL, so it also works on a GPU host that only has torch + transformers + peft:
`python tests/training/local/test_gpu_smoke.py` prints a JSON report.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from training import demo  # noqa: E402
from training.local.common import rollout, token_logprobs  # noqa: E402
from training.models import load_model_and_tokenizer, resolve_dtype  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def _job(root: Path, kind: str, model: Path, teacher: Path, **hp) -> Path:
    run = demo.write_demo_run(root / kind, kind, model, teacher, hp_overrides={"device": "cuda", "dtype": "auto", **hp})
    job = json.loads((run / "job.json").read_text())
    job.pop("reward")  # keeps the sandbox (and its bwrap) out of a bare GPU image
    (run / "job.json").write_text(json.dumps(job))
    return run


def smoke(root: Path) -> dict:
    from training.local.train import run_job

    report: dict = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
                    "dtype_auto": str(resolve_dtype("auto", torch.device("cuda")))}
    model = demo.build_demo_model(root / "m")
    teacher = demo.build_demo_teacher(root / "t", steps=150)
    rm = demo.build_demo_reward_base(root / "rm")

    policy, tok = load_model_and_tokenizer(model, "cuda", torch.float32, lora={"rank": 4, "alpha": 8})
    with torch.autocast("cuda", dtype=torch.bfloat16):
        ro = rollout(policy, tok, ["1+2=", "3+3="], 4, 4, temperature=1.0)
        lp_bf16, ent = token_logprobs(policy, ro.input_ids, ro.attention_mask, ro.response_len, with_entropy=True)
        with policy.disable_adapter():
            ref_bf16, _ = token_logprobs(policy, ro.input_ids, ro.attention_mask, ro.response_len)
    lp_fp32, _ = token_logprobs(policy, ro.input_ids, ro.attention_mask, ro.response_len)
    m = ro.response_mask
    finite = bool(torch.isfinite(lp_bf16).all() and torch.isfinite(ent).all())
    report["rollout"] = {"rows": len(ro.texts), "finite": finite,
                         "max_abs_logp_bf16_vs_fp32": float(((lp_bf16 - lp_fp32).detach().abs() * m).max()),
                         "lora_zero_init_ref_equal": float(((lp_bf16 - ref_bf16).abs() * m).max())}

    for kind, hp in (("distill", {"max_steps": 40, "test_freq": 40, "save_freq": 20}),
                     ("reward_model", {"max_steps": 60, "test_freq": 60, "save_freq": 30})):
        run = _job(root, kind, rm if kind == "reward_model" else model, teacher, **hp)
        t0 = time.time()
        run_job(run, run / "metrics.jsonl")
        rows = {json.loads(x)["step"]: json.loads(x)["data"] for x in (run / "metrics.jsonl").read_text().splitlines()}
        key = "val/distill/kd_loss" if kind == "distill" else "rm/val_accuracy"
        last = hp["max_steps"]
        branch = _job(root / "branch", kind, rm if kind == "reward_model" else model, teacher, **hp)
        job = json.loads((branch / "job.json").read_text())
        job["resume_from"] = str(run / "checkpoints" / f"global_step_{hp['save_freq']}")
        (branch / "job.json").write_text(json.dumps(job))
        run_job(branch, branch / "metrics.jsonl")
        b = {json.loads(x)["step"]: json.loads(x)["data"] for x in (branch / "metrics.jsonl").read_text().splitlines()}
        diffs = [abs(b[s][k] - rows[s][k]) for s in b for k in b[s]
                 if not k.startswith(("timing_s/", "perf/")) and b[s][k] is not None and rows[s].get(k) is not None]
        report[kind] = {"wall_s": round(time.time() - t0, 1), "start": rows[0][key], "end": rows[last][key],
                        "resume_steps": sorted(b), "resume_max_abs_diff": max(diffs) if diffs else None}
    return report


def test_cuda_smoke(tmp_path):
    rep = smoke(tmp_path)
    assert rep["dtype_auto"] == "torch.bfloat16"
    assert rep["rollout"]["finite"] and rep["rollout"]["lora_zero_init_ref_equal"] == 0.0
    assert rep["distill"]["end"] < rep["distill"]["start"]
    assert rep["reward_model"]["end"] > 0.6


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        print("SMOKE_REPORT " + json.dumps(smoke(Path(d))), flush=True)
