"""On-demand checkpoint evaluation: the win rate against dataset or base-model references."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from training import demo
from training.evaluate import EvaluationError, evaluate
from training.models import build_tiny_model

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("eval-models")
    # the base is random (never right); the "good" model was taught the sums
    base = build_tiny_model(root / "base", vocab=demo.DEMO_VOCAB, hidden=64, layers=2, max_positions=32)
    return {"base": base, "good": demo.build_demo_teacher(root / "good", steps=100)}


def _run(tmp_path: Path, base: Path, reference: str | None = None, name: str = "run") -> Path:
    run = demo.write_demo_run(tmp_path / name, "grpo", base)
    rows = [{**r, "reference": (r["ground_truth"] if reference == "truth" else reference)}
            for r in demo.arithmetic_rows("val")]
    (run / "data" / "val.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def _checkpoint(run: Path, model_dir: Path, step: int) -> Path:
    ckpt = run / "checkpoints" / f"global_step_{step}"
    shutil.copytree(model_dir, ckpt / "model")
    (ckpt / "manifest.json").write_text(json.dumps({"step": step, "format": "local", "lora": False}))
    return ckpt


def test_the_base_model_against_itself_ties_everywhere(tmp_path, models):
    run = _run(tmp_path, models["base"])  # no dataset reference: the base model's reply is the reference
    ckpt = _checkpoint(run, models["base"], 0)
    res = evaluate(run, ckpt, tmp_path / "out" / "result.json")
    assert res["reference"] == "base model"
    assert res["n"] == 36 and res["win_rate"] == pytest.approx(0.5)
    assert res["lo"] < 0.5 < res["hi"]
    samples = [json.loads(x) for x in Path(res["samples_path"]).read_text().splitlines()]
    assert len(samples) == 36 and all(s["win"] == 0.5 for s in samples)
    assert (res["wins"], res["ties"], res["losses"]) == (0, 36, 0)  # the ½ is all ties, said as such
    assert "half a win" in res["tie_rule"]
    assert json.loads((tmp_path / "out" / "result.json").read_text())["n"] == 36


def test_a_better_checkpoint_beats_the_base_model(tmp_path, models):
    run = _run(tmp_path, models["base"])
    res = evaluate(run, _checkpoint(run, models["good"], 7), tmp_path / "o" / "r.json")
    # the taught model gets most sums right where the random base never is
    assert res["step"] == 7 and res["win_rate"] > 0.75 and res["lo"] > 0.5
    assert res["mean_reward"] > 0.7


def test_against_correct_references_the_base_model_loses(tmp_path, models):
    run = _run(tmp_path, models["base"], reference="truth")
    res = evaluate(run, _checkpoint(run, models["base"], 3), tmp_path / "o" / "r.json")
    assert res["reference"] == "dataset"
    assert res["win_rate"] < 0.35 and res["hi"] < 0.5  # a correct reference is never beaten, only tied
    assert res["wins"] == 0 and res["ties"] + res["losses"] == res["n"] == 36
    # against the truth a tie is a correct answer: the accuracy is the share of ties, not the "win rate"
    assert res["accuracy_n"] == 36 and res["accuracy"] == pytest.approx(res["ties"] / 36)


def test_max_rows_limits_the_count(tmp_path, models):
    run = _run(tmp_path, models["base"], reference="truth")
    res = evaluate(run, _checkpoint(run, models["base"], 1), tmp_path / "o" / "r.json", max_rows=5)
    assert res["n"] == 5 and res["rows"] == 5


def test_reward_model_jobs_and_bad_paths_are_refused(tmp_path, models):
    run = _run(tmp_path, models["base"])
    with pytest.raises(EvaluationError, match="does not exist"):
        evaluate(run, run / "checkpoints" / "global_step_9", tmp_path / "r.json")
    bogus = run / "checkpoints" / "not_a_step"
    bogus.mkdir(parents=True)
    with pytest.raises(EvaluationError, match="global_step_N"):
        evaluate(run, bogus, tmp_path / "r.json")
    job = json.loads((run / "job.json").read_text())
    (run / "job.json").write_text(json.dumps({**job, "kind": "reward_model"}))
    with pytest.raises(EvaluationError, match="reward-model"):
        evaluate(run, _checkpoint(run, models["base"], 2), tmp_path / "r.json")


def test_cli_reports_a_clear_error_and_exit_code_2(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "training.evaluate", "--run-dir", str(tmp_path),
                           "--checkpoint", str(tmp_path / "global_step_1"), "--out", str(tmp_path / "r.json")],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: no job.json") and "Traceback" not in proc.stderr


def test_generation_goes_through_the_one_interface(tmp_path, models, monkeypatch):
    import training.evaluate as ev

    run = _run(tmp_path, models["base"], reference="truth")
    ckpt = _checkpoint(run, models["good"], 3)
    seen = []
    real = ev.load_generator

    def spy(path, **kw):
        seen.append((Path(path), kw["engine"]))
        return real(path, **kw)

    monkeypatch.setattr(ev, "load_generator", spy)
    res = evaluate(run, ckpt, tmp_path / "o" / "r.json", max_rows=6, engine="transformers")
    assert seen == [(ckpt.resolve(), "transformers")] and res["n"] == 6
    if not torch.cuda.is_available():
        with pytest.raises(EvaluationError, match="vllm"):
            evaluate(run, ckpt, tmp_path / "o2" / "r.json", max_rows=2, engine="vllm")
