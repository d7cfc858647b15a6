"""The CPU plugin's pieces, in this process (the end-to-end run is in tests/webapp/runs/test_verl_cpu_run.py)."""
from __future__ import annotations

import pytest

pytest.importorskip("verl")


def test_the_plugin_registers_the_platform_and_the_rollout(monkeypatch):
    monkeypatch.setenv("VERL_PLATFORM", "cpu")
    from verl.plugin.platform import PlatformRegistry
    from verl.workers.rollout import base as rollout_base
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    import training.verl_cpu.plugin  # noqa: F401
    from training.verl_cpu.rollout import HFReplica

    platform = PlatformRegistry.get("cpu")()
    assert platform.device_name == "cpu" and platform.communication_backend_name() == "gloo"
    assert platform.ray_resource_name() == "GPU"  # the launcher fakes one with ray_init.num_gpus
    assert RolloutReplicaRegistry.get("hf") is HFReplica
    assert rollout_base._ROLLOUT_REGISTRY[("hf", "async")] == "training.verl_cpu.rollout.HFServerAdapter"


def test_offloading_never_pins_memory():
    from torch.distributed.fsdp import CPUOffloadPolicy

    import training.verl_cpu.plugin  # noqa: F401

    assert CPUOffloadPolicy(pin_memory=True).pin_memory is False


@pytest.mark.parametrize("backend, expected", [
    ("cpu:gloo,cpu:gloo", "cpu:gloo"),
    ("cpu:gloo,cuda:nccl", "cpu:gloo,cuda:nccl"),
    ("gloo", "gloo"),
    (None, None),
])
def test_duplicate_backends_are_collapsed(backend, expected):
    from training.verl_cpu.plugin import dedupe_backend

    assert dedupe_backend(backend) == expected


def test_the_demo_tokenizer_falls_back_to_the_default_token_builder(tmp_path):
    from verl.utils import hf_tokenizer
    from verl.utils.tokenizer import continuous_token_wiring as wiring

    import training.verl_cpu.plugin  # noqa: F401
    from training.demo import DEMO_VOCAB
    from training.models import build_tiny_model

    path = build_tiny_model(tmp_path / "demo", vocab=DEMO_VOCAB, hidden=16, layers=1, max_positions=16)
    tok = hf_tokenizer(str(path))  # as VERL loads it: no newline token, no <|im_end|>
    with pytest.raises(ValueError, match="newline"):
        wiring.get_continuous_token_builder_class(wiring.ContinuousTokenModelFamily.QWEN)(tok)
    builder = wiring.create_continuous_token_builder(tok, hf_model_type="qwen2")
    assert type(builder).__name__ == "ContinuousTokenBuilder"


def test_sampling_filters_keep_the_distribution_valid():
    import torch

    from training.verl_cpu.batch_decode import filter_logits

    logits = torch.tensor([[2.0, 1.0, 0.5, -1.0]])
    kept = torch.isfinite(filter_logits(logits, 1.0, top_p=None, top_k=2))
    assert kept.tolist() == [[True, True, False, False]]
    probs = torch.softmax(filter_logits(logits, 0.5, top_p=0.7, top_k=None), dim=-1)
    assert probs[0, 0] > 0.7 and probs.sum().item() == pytest.approx(1.0)


def test_rays_start_up_waits_for_a_slow_raylet_and_still_gives_up_on_a_dead_one():
    """Ray's driver gives its new raylet a fixed 30 s to register; on a busy machine the lookup keeps asking."""
    from ray._private import services

    import training.verl_cpu.plugin  # noqa: F401
    from training.verl_cpu import cpu_env
    from training.verl_cpu.ray_startup import STARTUP_WAIT_S, patient, raylet_running

    assert getattr(services.get_node, "_patient", False)  # what ray/_private/node.py calls in its start-up loop
    now, answers = [0.0], ["not yet", "not yet", "not yet", {"NodeID": "n"}]

    def get_node(gcs_address, node_id):
        answer = answers.pop(0)
        if answer == "not yet":
            raise RuntimeError("node not found")
        return answer

    def sleep(s):
        now[0] += 40  # each wait longer than Ray's whole 30 s

    running = {"n": True}
    assert patient(get_node, clock=lambda: now[0], sleep=sleep, alive=running.get)("gcs", "n") == {"NodeID": "n"}
    answers[:] = ["not yet"] * 100
    now[0] = 0.0
    with pytest.raises(RuntimeError):  # a raylet that never registers still fails the start
        patient(get_node, wait_s=200, clock=lambda: now[0], sleep=sleep, alive=running.get)("gcs", "n")
    assert now[0] >= 200
    now[0], running["n"] = 0.0, False
    with pytest.raises(RuntimeError):  # one that has exited fails it at once
        patient(get_node, clock=lambda: now[0], sleep=sleep, alive=running.get)("gcs", "n")
    assert now[0] == 0.0
    assert not raylet_running("0" * 56)  # no raylet of that node here
    env = cpu_env()
    assert env["RAY_gcs_server_port_wait_time_s"] == env["RAY_worker_register_timeout_seconds"] == str(STARTUP_WAIT_S)


def test_on_the_private_cluster_ranks_meet_in_a_file_store(tmp_path):
    from training.verl_cpu import STORE_DIR_ENV
    from training.verl_cpu.plugin import private_rendezvous

    env = {STORE_DIR_ENV: str(tmp_path / "c10d"), "RANK": "1", "WORLD_SIZE": "2", "MASTER_PORT": "29511"}
    kwargs = private_rendezvous({"backend": "cpu:gloo"}, env)
    assert kwargs == {"backend": "cpu:gloo", "init_method": f"file://{tmp_path}/c10d/c10d-29511",
                      "rank": 1, "world_size": 2}
    assert (tmp_path / "c10d").is_dir()
    # elsewhere (an existing cluster, an explicit store or method) torch's own rendezvous is kept
    assert private_rendezvous({"backend": "gloo"}, {k: v for k, v in env.items() if k != STORE_DIR_ENV}) == \
        {"backend": "gloo"}
    assert private_rendezvous({"init_method": "tcp://127.0.0.1:1"}, env) == {"init_method": "tcp://127.0.0.1:1"}
