#!/usr/bin/env bash
# Real VERL GRPO smoke test for a GPU host running VERL's image (verlai/verl, vLLM inside).
#
#   bash scripts/gpu_smoke.sh [WORK_DIR]
#
# 1. installs what the host lacks (pip, constrained to the packages already installed, so the
#    image's torch/vLLM are never touched; bubblewrap via apt when we are root);
# 2. builds a tiny Qwen2 + char tokenizer offline (or uses SMOKE_MODEL=/abs/hf/folder);
# 3. writes a run directory (job.json, pinned rows, reward function) and lets OUR backend
#    (training.backends.verl) write the parquet, the reward wrapper and the exact main_ppo
#    command; runs it under training.supervisor: GRPO for 2 steps with a checkpoint at step 2;
# 4. ingests metrics/checkpoints/samples with training/ingest.py;
# 5. restarts the run (attempt 2, max_steps 4): VERL must resume from global_step_2;
# 6. exports the last checkpoint to HF with verl.model_merger and loads it; prints a summary.
# Env: SMOKE_MODEL, SMOKE_ENGINE (vllm|sglang), SMOKE_GPUS (default 1), SMOKE_TIMEOUT (s per attempt),
#      SMOKE_TRAINER (v1, the app's default, or legacy: VERL's two trainers),
#      SMOKE_PREPARE_ONLY=1 (no GPU needed: build the run dir, print the command, stop).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="${1:-$(mktemp -d /tmp/verl-smoke.XXXXXX)}"
PY="${PYTHON:-python3}"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WANDB_MODE=disabled
mkdir -p "$WORK"
echo "== repo $REPO, work dir $WORK"

# -- 1. dependencies --------------------------------------------------------------------------------
if [ -z "${SMOKE_PREPARE_ONLY:-}" ]; then
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
"$PY" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print('torch', torch.__version__)"
ENGINE="${SMOKE_ENGINE:-vllm}"
"$PY" -c "import $ENGINE" 2>/dev/null || { echo "$ENGINE is not installed: use VERL's image (verlai/verl:vllm*)"; exit 2; }
PINS="$WORK/image-pins.txt"
"$PY" -m pip list --format=freeze 2>/dev/null | grep -viE '^(verl)==' > "$PINS"
if ! "$PY" -c "import verl, sys; sys.exit(verl.__version__ != '0.9.1')" 2>/dev/null; then
  "$PY" -m pip install -q -c "$PINS" "verl==0.9.1"
fi
# VERL's V1 trainer keeps its batches in TransferQueue, which VERL lists only in an extra: the lock's version
if [ "${SMOKE_TRAINER:-v1}" != legacy ] && ! "$PY" -c "import transfer_queue" 2>/dev/null; then
  "$PY" -m pip install -q -c "$PINS" "$(grep -i '^transferqueue==' "$REPO/requirements/lock.txt")"
fi
for mod in orjson pyarrow datasets hydra; do
  "$PY" -c "import $mod" 2>/dev/null || "$PY" -m pip install -q -c "$PINS" "$([ $mod = hydra ] && echo hydra-core || echo $mod)"
done
if ! command -v bwrap >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  (apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null) || echo "bubblewrap not installed: sandbox falls back"
fi
fi
"$PY" -c "import torch, verl; print('verl', verl.__version__, 'torch', torch.__version__)"

# -- 2..6 in Python -------------------------------------------------------------------------------
"$PY" - "$WORK" <<'PYEOF'
import json, os, subprocess, sys, time
from pathlib import Path

work = Path(sys.argv[1]).resolve()
run_dir, engine = work / "run", os.environ.get("SMOKE_ENGINE", "vllm")
timeout = int(os.environ.get("SMOKE_TIMEOUT", "1500"))
gpus = int(os.environ.get("SMOKE_GPUS", "1"))
from training.backends.verl import VerlBackend
from training.ingest import discover_checkpoints, read_metrics, read_samples
from training.backends.verl_export import run_export

# 2. model: head_dim 64 (vLLM's attention kernels do not take the 16 of build_tiny_model).
model_dir = os.environ.get("SMOKE_MODEL")
if not model_dir:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from training.models import build_char_tokenizer
    model_dir = str(work / "tiny-model")
    tok = build_char_tokenizer()
    tok.chat_template = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                         "{% if add_generation_prompt %}assistant: {% endif %}")
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512,
                      tie_word_embeddings=True, pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                      eos_token_id=tok.eos_token_id)
    Qwen2ForCausalLM(cfg).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
print("== model", model_dir)

# 3. the run directory, as the web app writes it
(run_dir / "data").mkdir(parents=True, exist_ok=True)
(run_dir / "reward").mkdir(exist_ok=True)
rows = [{"prompt": f"{a}+{b}=", "ground_truth": str(a + b), "data_source": "arith", "ability": "math",
         "extra_info": {}, "reference": str(a + b)} for a in range(10) for b in range(10)]
for split, part in (("train", rows[:80]), ("val", rows[80:96])):
    (run_dir / "data" / f"{split}.jsonl").write_text("\n".join(json.dumps(r) for r in part) + "\n")
(run_dir / "reward" / "exact_match.py").write_text(
    "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
    "    s = solution_str.strip()\n"
    "    return {'score': float(s == ground_truth), 'starts': float(s[:1] == ground_truth[:1])}\n")
spec = {"job_id": "smoke", "kind": "grpo", "backend": "verl", "model": {"path": model_dir, "name": "smoke"},
        "data": {"train": "data/train.jsonl", "val": "data/val.jsonl"},
        "reward": {"shaping": "raw", "components": [
            {"type": "function", "path": "reward/exact_match.py", "name": "compute_score", "weight": 1.0}]},
        "hp": {"lr": 1e-5, "kl_coef": 0.01, "kl_loss_type": "low_var_kl", "batch_size": 16, "epochs": 1,
               "max_steps": 2, "max_prompt_length": 64, "max_response_length": 32, "group_size": 4,
               "temperature": 1.0, "clip_ratio": 0.2, "loss_agg_mode": "token-mean",
               "lora": {"rank": 0}, "save_freq": 2, "test_freq": 2, "seed": 1},
        "verl": {"rollout_engine": engine, "n_gpus_per_node": gpus, "nnodes": 1,
                 "use_v1": os.environ.get("SMOKE_TRAINER", "v1") != "legacy",
                 "gpu_memory_utilization": 0.3, "reward_workers": 2},
        "sandbox": {"time_limit_s": 5, "batch_time_limit_s": 120, "memory_mb": 1024}}


def attempt(k: int) -> dict:
    (run_dir / "job.json").write_text(json.dumps(spec, indent=1))
    plan = VerlBackend().prepare(spec, run_dir, k)
    adir = run_dir / "attempts" / str(k)
    (adir / "launch.json").write_text(json.dumps(plan.to_json()))
    print(f"== attempt {k}: {len(plan.argv) - 3} overrides, see {adir}/overrides.txt", flush=True)
    t0 = time.time()
    try:
        rc = subprocess.run([sys.executable, "-m", "training.supervisor", "--attempt-dir", str(adir)],
                            timeout=timeout).returncode
    except subprocess.TimeoutExpired:
        (adir / "CANCEL").write_text("timeout")
        rc = 124
    exit_info = json.loads((adir / "exit.json").read_text()) if (adir / "exit.json").exists() else {}
    print(f"== attempt {k} finished rc={rc} in {time.time() - t0:.0f} s: {exit_info}", flush=True)
    if rc != 0 or exit_info.get("returncode") not in (0, None):
        tail = (adir / "log.txt").read_text(errors="replace")[-6000:] if (adir / "log.txt").exists() else ""
        print(tail)
        sys.exit(f"attempt {k} failed")
    return exit_info


if os.environ.get("SMOKE_PREPARE_ONLY"):
    (run_dir / "job.json").write_text(json.dumps(spec, indent=1))
    print(VerlBackend().dry_run(spec, run_dir), end="")
    sys.exit(0)
failures = []
attempt(1)
metrics = read_metrics(run_dir)
ckpts = discover_checkpoints(run_dir)
print("== metrics steps after attempt 1:", sorted(metrics))
if 2 not in metrics or "critic/score/mean" not in metrics.get(2, {}):
    failures.append("no training metrics for step 2")
if not any(c.step == 2 and c.complete for c in ckpts):
    failures.append("no complete checkpoint global_step_2")

spec["hp"]["max_steps"] = 4  # 5. a restart of the same run: backend picks resume_mode=auto
attempt(2)
own = (run_dir / "attempts" / "2" / "metrics.jsonl").read_text().splitlines()
steps2 = sorted({json.loads(x)["step"] for x in own if x.strip()})
print("== attempt 2 logged steps:", steps2)
if 1 in steps2 or 4 not in steps2:
    failures.append(f"attempt 2 did not resume from step 2 (logged {steps2})")
metrics = read_metrics(run_dir)
ckpts = discover_checkpoints(run_dir)
last = max((c for c in ckpts if c.complete), key=lambda c: c.step)

out = run_export(spec, run_dir, last.step, timeout=900)  # 6. export + load
from transformers import AutoModelForCausalLM
AutoModelForCausalLM.from_pretrained(out)

keys = ["critic/score/mean", "actor/kl_loss", "actor/pg_loss", "actor/entropy", "response_length/mean",
        "timing_s/step", "perf/throughput"]
print("\n== summary")
for step in sorted(metrics):
    vals = {k.split("/")[-2] + "/" + k.split("/")[-1]: metrics[step].get(k) for k in keys if k in metrics[step]}
    val = {k: v for k, v in metrics[step].items() if k.startswith("val-")}
    print(f"step {step}: {vals} {'val: ' + str(val) if val else ''}")
print("checkpoints:", [(c.step, c.complete, round(c.size_bytes / 2**20, 1)) for c in ckpts])
print("val samples at the last step:", len(read_samples(run_dir, "val")), "rows;",
      "rollout dumps:", len(read_samples(run_dir, "rollout")), "rows")
print("exported:", out)
if failures:
    sys.exit("SMOKE FAILED: " + "; ".join(failures))
print("SMOKE OK")
PYEOF
