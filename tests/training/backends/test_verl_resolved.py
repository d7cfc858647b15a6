"""Before an attempt starts, the override list is composed with the installed VERL's config and compared with
the plan: a setting that does not reach its key, or a legacy reward key VERL 0.9 accepts and ignores, stops
the launch with the key, the planned value and the resolved one."""
from __future__ import annotations

import pytest

pytest.importorskip("verl")

from training.backends import verl_overrides, verl_resolved  # noqa: E402
from training.backends.base import BackendError  # noqa: E402
from training.backends.verl import VerlBackend  # noqa: E402
from training.backends.verl_overrides import VerlJob  # noqa: E402
from training.backends.verl_plan import Resume  # noqa: E402


def _check(spec, run_dir, overrides, pairs):
    reward_fn = str(run_dir.resolve() / "verl" / "reward_fn.py")
    return verl_resolved.check(VerlJob.from_spec(spec), overrides, pairs, reward_fn)


def test_a_planted_legacy_top_level_reward_key_stops_the_launch(make_run, monkeypatch):
    spec, run_dir = make_run()
    real = verl_overrides._reward_overrides

    def legacy(reward, reward_module, engine):  # the pre-0.9 spelling of the reward function keys
        return [(k.removeprefix("reward."), v) for k, v in real(reward, reward_module, engine)]

    monkeypatch.setattr(verl_overrides, "_reward_overrides", legacy)
    with pytest.raises(BackendError) as err:
        VerlBackend().prepare(run_dir, 1)
    message = err.value.message
    reward_fn = str(run_dir.resolve() / "verl" / "reward_fn.py")
    # the planned key resolved to VERL's default, and the legacy key holds the value VERL would not use
    assert f"reward.custom_reward_function.path (Reward function): planned {reward_fn}, VERL resolved null" in message
    assert "custom_reward_function.path (Legacy reward key" in message and f"VERL resolved {reward_fn}" in message
    assert not (run_dir / "attempts" / "1" / "launch.json").exists()


def test_a_setting_overridden_after_the_form_is_caught_with_both_values(make_run):
    spec, run_dir = make_run({"hp": {"lr": 3e-5}})
    overrides, pairs = VerlJob.from_spec(spec).plan(VerlBackend()._paths(run_dir.resolve(), 1), 80, Resume("disable"))
    planted = overrides + ["actor_rollout_ref.actor.optim.lr=0.5"]
    with pytest.raises(BackendError, match=r"actor_rollout_ref\.actor\.optim\.lr \(Learning rate\): "
                                           r"the form says 3e-05, VERL resolved 0\.5"):
        _check(spec, run_dir, planted, pairs)
    legacy_manager = overrides + ["reward_model.reward_manager=prime"]
    with pytest.raises(BackendError, match=r"reward_model\.reward_manager \(Legacy reward key.*VERL resolved prime"):
        _check(spec, run_dir, legacy_manager, pairs)
    swapped_manager = [o for o in overrides if not o.startswith("reward.reward_manager.name=")] + \
        ["reward.reward_manager.name=dapo"]
    with pytest.raises(BackendError, match=r"reward\.reward_manager\.name \(Reward manager\): planned naive"):
        _check(spec, run_dir, swapped_manager, pairs)


def test_the_dry_run_shows_each_setting_at_its_resolved_key(make_run):
    spec, run_dir = make_run({"hp": {"lr": 3e-5, "max_steps": 12, "seed": 7}})
    text = VerlBackend().dry_run(spec, run_dir)
    assert "# setting -> VERL key -> resolved value" in text
    assert "#   Learning rate (3e-05) -> actor_rollout_ref.actor.optim.lr -> 3e-05" in text
    assert "#   Max steps (12) -> trainer.total_training_steps -> 12" in text
    assert "#   Seed (7) -> data.seed -> 7" in text and "#   Seed (7) -> actor_rollout_ref.rollout.seed -> 7" in text
    assert "-> reward.reward_manager.name -> naive" in text
    assert "-> trainer.use_v1 -> true" in text


def test_a_cpu_rehearsal_says_which_settings_it_replaces(make_run, base_spec):
    spec, run_dir = make_run({"hp": {**base_spec["hp"], "device": "cpu"}})
    _, rows = VerlBackend().preview(spec, run_dir)
    by_key = {r.key: r for r in rows}
    engine = by_key["actor_rollout_ref.rollout.name"]
    assert (engine.form, engine.resolved, engine.note) == ("vllm", "hf", "CPU rehearsal")
    assert by_key["actor_rollout_ref.actor.optim.lr"].note == ""
    assert all(r.ok for r in rows)


@pytest.mark.parametrize("rows,batch,epochs,max_steps", [(36, 16, 1, 4), (80, 64, 3, 12), (80, 8, 1, 3)])
def test_max_steps_gets_enough_epochs_for_verls_loop(make_run, base_spec, rows, batch, epochs, max_steps):
    """VERL stops at the end of trainer.total_epochs even before total_training_steps (ray_trainer.fit):
    the plan gives it the epochs that max_steps needs, as the local trainer goes round its data."""
    spec, run_dir = make_run({"hp": {**base_spec["hp"], "batch_size": batch, "epochs": epochs,
                                     "max_steps": max_steps}}, n_train=rows)
    _, rows_shown = VerlBackend().preview(spec, run_dir)
    by_key = {r.key: r for r in rows_shown}
    per_epoch = rows // by_key["data.train_batch_size"].resolved  # VERL's train dataloader drops the last batch
    assert by_key["trainer.total_epochs"].resolved * per_epoch >= max_steps
    assert by_key["trainer.total_training_steps"].resolved == max_steps
    assert by_key["trainer.total_epochs"].resolved >= epochs


def test_a_host_without_verl_previews_the_command_and_leaves_the_check_to_the_worker(make_run, monkeypatch):
    spec, run_dir = make_run()
    real = verl_resolved.importlib.util.find_spec
    monkeypatch.setattr(verl_resolved.importlib.util, "find_spec", lambda name: None if name == "verl" else real(name))
    text, rows = VerlBackend().preview(spec, run_dir)
    assert rows == [] and "python -m verl.trainer.main_ppo" in text
    assert "VERL is not installed here: the worker checks what VERL resolves before launch" in text
    with pytest.raises(BackendError, match="VERL is not installed on this worker"):
        VerlBackend().prepare(run_dir, 1)


def test_two_threads_compose_at_once(monkeypatch):
    """Two job pages at once on a threaded server: each composes VERL's config in Hydra's one global state."""
    import contextlib
    import threading

    import hydra

    both_inside = threading.Barrier(2)
    real = hydra.compose

    def held(*args, **kwargs):  # hold the first one inside Hydra until the second arrives (or gives up waiting)
        with contextlib.suppress(threading.BrokenBarrierError):
            both_inside.wait(timeout=2)
        return real(*args, **kwargs)

    monkeypatch.setattr(hydra, "compose", held)
    results, errors = [], []

    def one() -> None:
        try:
            results.append(verl_resolved.compose(["trainer.total_epochs=2"]).trainer.total_epochs)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors and results == [2, 2], errors
