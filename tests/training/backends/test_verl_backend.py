"""VerlBackend.prepare / dry_run and the local backend's LaunchPlan, on real run directories."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from training.backends import BackendError, LaunchPlan, get_backend
from training.backends.verl import VerlBackend, stop_argv


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def test_get_backend_knows_both_backends_and_explains_a_typo():
    assert get_backend("verl").name == "verl" and get_backend("local").name == "local"
    with pytest.raises(BackendError, match="unknown backend 'vllm'"):
        get_backend("vllm")


def test_local_backend_launches_the_local_trainer_with_a_per_attempt_metrics_file(make_run):
    spec, run_dir = make_run()
    plan = get_backend("local").prepare(run_dir, 2)
    assert plan.argv[1:] == ["-m", "training.local.train", "--run-dir", str(run_dir.resolve())]
    assert plan.env["VERL_FILE_LOGGER_PATH"] == str(run_dir.resolve() / "attempts" / "2" / "metrics.jsonl")
    assert (run_dir / "attempts" / "2").is_dir()


def test_prepare_writes_parquet_reward_module_and_the_exact_command(make_run):
    spec, run_dir = make_run()
    plan = VerlBackend().prepare(run_dir, 1)
    assert isinstance(plan, LaunchPlan)
    assert plan.argv[:3] == [sys.executable, "-m", "verl.trainer.main_ppo"]
    assert plan.cwd == str(run_dir.resolve())
    assert plan.env["VERL_FILE_LOGGER_PATH"] == str(run_dir.resolve() / "attempts/1/metrics.jsonl")
    assert plan.env["WANDB_MODE"] == "disabled"
    for name in ["data/train.parquet", "data/val.parquet", "verl/reward.json", "verl/reward_fn.py",
                 "attempts/1/overrides.txt"]:
        assert (run_dir / name).is_file(), name
    assert (run_dir / "attempts/1/overrides.txt").read_text().splitlines() == plan.argv[3:]
    cfg = json.loads((run_dir / "verl/reward.json").read_text())
    assert cfg["components"][0]["source_path"] == str((run_dir / "reward/exact_match.py").resolve())
    assert json.dumps(plan.to_json())  # launch.json is plain JSON


def test_dry_run_writes_nothing_and_lists_one_override_per_line(make_run):
    spec, run_dir = make_run()
    before = _files(run_dir)
    text = VerlBackend().dry_run(spec, run_dir)
    assert _files(run_dir) == before
    lines = text.splitlines()
    assert lines[0] == f"# run dir: {run_dir.resolve()}"
    assert "trainer.resume_mode=disable" in lines and "python -m verl.trainer.main_ppo" in lines
    # the dry run shows what prepare will launch
    plan = VerlBackend().prepare(run_dir, 1)
    assert [line for line in lines if not line.startswith(("#", "python"))] == plan.argv[3:]


def test_a_restart_of_the_same_run_resumes_automatically(make_run):
    spec, run_dir = make_run()
    (run_dir / "checkpoints" / "global_step_10" / "actor").mkdir(parents=True)
    (run_dir / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("10")
    plan = VerlBackend().prepare(run_dir, 2)
    assert "trainer.resume_mode=auto" in plan.argv
    assert f"hydra.run.dir={run_dir.resolve()}/attempts/2/hydra" in plan.argv


def test_resume_from_a_missing_checkpoint_is_refused(make_run, tmp_path):
    spec, run_dir = make_run({"resume_from": str(tmp_path / "gone" / "checkpoints" / "global_step_5")})
    with pytest.raises(BackendError, match="no actor/ folder"):
        VerlBackend().prepare(run_dir, 1)


@pytest.mark.parametrize("updates,message", [
    ({"model": {"path": "./models/tiny"}}, "absolute path"),  # hub ids like Qwen/Qwen2.5-0.5B are allowed
    ({"model": {"path": "/nonexistent/model"}}, "no config.json"),
    ({"reward": {"components": [{"type": "function", "path": "reward/missing.py"}]}}, "not found"),
    ({"data": {"train": "data/none.jsonl", "val": "data/val.jsonl"}}, "data file not found"),
    ({"sandbox": {"time_limit": 5}}, "sandbox: unknown sandbox limit"),
])
def test_bad_specs_get_clear_errors(make_run, updates, message):
    spec, run_dir = make_run(updates)
    with pytest.raises(BackendError, match=message):
        VerlBackend().prepare(run_dir, 1)


def test_a_reward_with_a_syntax_error_is_refused_before_launch(make_run):
    spec, run_dir = make_run()
    (run_dir / "reward" / "exact_match.py").write_text("def compute_score(:\n")
    with pytest.raises(BackendError, match="does not compile"):
        VerlBackend().prepare(run_dir, 1)


def test_use_v1_without_transferqueue_is_refused(make_run, base_spec, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "transfer_queue" else real(name, *a))
    spec, run_dir = make_run({"verl": {**base_spec["verl"], "use_v1": True}})
    with pytest.raises(BackendError, match="TransferQueue"):
        VerlBackend().prepare(run_dir, 1)


def test_multi_node_is_a_ray_job_that_cancel_stops(make_run, base_spec, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "http://head:8265")
    spec, run_dir = make_run({"verl": {**base_spec["verl"], "n_gpus_per_node": 8, "nnodes": 2}})
    plan = VerlBackend().prepare(run_dir, 3)
    sep = plan.argv.index("--")
    assert plan.argv[1:4] == ["job", "submit", "--address"] and plan.argv[4] == "http://head:8265"
    assert plan.argv[sep + 1:sep + 4] == ["python3", "-m", "verl.trainer.main_ppo"]
    runtime_env = json.loads(plan.argv[plan.argv.index("--runtime-env-json") + 1])
    metrics = str(run_dir.resolve() / "attempts/3/metrics.jsonl")
    assert runtime_env["env_vars"]["VERL_FILE_LOGGER_PATH"] == metrics
    # only there: Ray refuses a driver's ray.init runtime env that repeats a key of the job's
    assert not [a for a in plan.argv if a.startswith("+ray_kwargs.ray_init.runtime_env")]
    sub_id = plan.argv[plan.argv.index("--submission-id") + 1]
    assert plan.cancel_argv[1:] == ["job", "stop", "--address", "http://head:8265", sub_id]
    assert stop_argv(spec, run_dir, 3) == plan.cancel_argv
    assert plan.ray_job == {"address": "http://head:8265", "submission_id": sub_id}
    monkeypatch.delenv("RAY_ADDRESS")
    assert stop_argv(make_run(name="single")[0], run_dir, 1) is None


def test_multi_node_without_a_ray_cluster_is_a_retryable_error(make_run, base_spec, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    spec, run_dir = make_run({"verl": {**base_spec["verl"], "nnodes": 2}})
    with pytest.raises(BackendError, match="RAY_ADDRESS") as exc:
        VerlBackend().prepare(run_dir, 1)
    assert exc.value.permanent is False


def test_reference_scoring_is_off_when_some_val_rows_lack_a_reference(make_run):
    spec, run_dir = make_run()
    rows = [json.loads(x) for x in (run_dir / "data/val.jsonl").read_text().splitlines()]
    rows[0]["reference"] = None
    (run_dir / "data/val.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    VerlBackend().prepare(run_dir, 1)
    assert json.loads((run_dir / "verl/reward.json").read_text())["score_references"] is False
