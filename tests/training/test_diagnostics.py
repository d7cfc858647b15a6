"""Diagnostics on the run's host: secrets scrubbed from text and environments, versions read, and stack dumps of
a real hung process by py-spy and, without py-spy, by the faulthandler the trainer registers."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from training import diagnostics
from training.diagnostics import REDACTED, Scrubber
from training.supervisor import ATTEMPT_ENV

HANG = """
import sys, time
sys.path.insert(0, {root!r})
if {register}:
    from training.diagnostics import register_faulthandler
    register_faulthandler()
def deep_in_the_rollout():
    print("ready", flush=True)
    time.sleep(120)
deep_in_the_rollout()
"""


def test_scrubber_removes_known_values_url_credentials_assignments_and_auth_headers():
    s = Scrubber(["hook-secret-abcdef", "tok", None])  # values under 6 characters are not matched blindly
    text = ("hook-secret-abcdef in a log\npostgres://wb:pa55word@db:5432/wb redis://:r3dis@127.0.0.1/0\n"
            "SECRET_KEY=django-insecure-x API_TOKEN: 'abc123' password=hunter22 tok stays\n"
            "Authorization: Token 0123456789abcdef\nlr=1e-6 max_steps=40")
    out = s.text(text)
    for secret in ("hook-secret-abcdef", "pa55word", "r3dis", "django-insecure-x", "abc123", "hunter22",
                   "0123456789abcdef"):
        assert secret not in out, secret
    assert "postgres://wb:[redacted]@db:5432/wb" in out and "lr=1e-6 max_steps=40" in out and "tok stays" in out
    env = s.env({"HF_TOKEN": "hf_x", "AWS_SECRET_ACCESS_KEY": "k", "PATH": "/usr/bin", "DATABASE_URL": "postgres://a:b@h/d",
                 "nested": {"password": "p", "ok": 1}})
    assert env["HF_TOKEN"] == env["AWS_SECRET_ACCESS_KEY"] == REDACTED and env["PATH"] == "/usr/bin"
    assert env["DATABASE_URL"] == f"postgres://a:{REDACTED}@h/d" and env["nested"] == {"password": REDACTED, "ok": 1}
    # settings that only look like secrets stay readable: a bundle must still show the configuration
    harmless = {"TOKENIZERS_PARALLELISM": "false", "data.prompt_key": "prompt", "max_tokens": 5}
    assert s.env(harmless) == harmless
    assert s.text("TOKENIZERS_PARALLELISM=false max_tokens=5 prompt_key: prompt") == \
        "TOKENIZERS_PARALLELISM=false max_tokens=5 prompt_key: prompt"
    from_env = Scrubber.from_environment(env={"MY_API_KEY": "planted-api-key-77", "HOME": "/root"})
    assert from_env.text("key planted-api-key-77 home /root") == f"key {REDACTED} home /root"


def test_versions_are_read_without_importing():
    versions = diagnostics.package_versions()
    import torch

    assert versions["torch"] == torch.__version__.split("+")[0] or versions["torch"] == torch.__version__
    assert versions["python"] == sys.version.split()[0] and versions["vllm"] in ("not installed",) or versions["vllm"]
    app = diagnostics.app_version()
    assert app["describe"] and app["source"] in ("git", "VERSION", "pyproject.toml")


@pytest.fixture
def hung(tmp_path):
    procs = []

    def start(register: bool) -> Path:
        adir = tmp_path / f"attempts-{len(procs)}" / "1"
        adir.mkdir(parents=True)
        root = str(Path(__file__).resolve().parents[2])
        proc = subprocess.Popen([sys.executable, "-c", HANG.format(root=root, register=register)],
                                env={**os.environ, ATTEMPT_ENV: str(adir.resolve())}, stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        assert proc.stdout.readline().strip() == "ready"
        return adir
    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def test_py_spy_dumps_the_hung_process_of_the_attempt(hung):
    adir = hung(register=False)
    assert diagnostics.py_spy(), "py-spy comes with ray[default]"
    started = time.time()
    text = diagnostics.dump_stacks(adir, timeout_s=120)  # py-spy on a busy machine
    assert "by py-spy dump" in text and "deep_in_the_rollout" in text and "1 Python process" in text
    assert time.time() - started < 240  # the dump is bounded by its timeout
    kept = diagnostics.write_stacks(adir, text)
    assert diagnostics.saved_stacks(adir) == [kept]


def test_without_py_spy_the_trainer_dumps_itself_on_a_signal(hung, monkeypatch):
    adir = hung(register=True)
    deadline = time.time() + 120
    while not list((adir / "stacks").glob("faulthandler-*.txt")) and time.time() < deadline:
        time.sleep(0.1)
    monkeypatch.setattr(diagnostics, "py_spy", lambda: None)
    text = diagnostics.dump_stacks(adir, timeout_s=120)
    assert "faulthandler" in text and "deep_in_the_rollout" in text
    assert diagnostics.saved_stacks(adir) == []  # the faulthandler file is not a kept dump
    unregistered = hung(register=False)
    assert "registered no faulthandler" in diagnostics.dump_stacks(unregistered, timeout_s=10)


def test_ray_workers_are_found_by_the_attempts_private_ray_dir(tmp_path):
    """A raylet starts its workers with its own environment: they carry no attempt marker, but every one of them
    names the attempt's private Ray temp dir (launch.json's scratch_dirs) on its command line."""
    import json

    adir = tmp_path / "attempts" / "1"
    adir.mkdir(parents=True)
    ray_dir = tmp_path / "rlhf-ray-abc123"
    (adir / "launch.json").write_text(json.dumps({"argv": ["true"], "scratch_dirs": [str(ray_dir)]}))
    env = {k: v for k, v in os.environ.items() if k != ATTEMPT_ENV}
    worker = subprocess.Popen([sys.executable, "-c", "import sys, time\ndef ray_worker_main_loop():\n"
                               "    print('ready', flush=True); time.sleep(120)\nray_worker_main_loop()",
                               f"--temp-dir={ray_dir}"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert worker.stdout.readline().strip() == "ready"
        assert worker.pid in diagnostics.attempt_pids(adir)
        text = diagnostics.dump_stacks(adir, timeout_s=30)
        assert "ray_worker_main_loop" in text and f"pid {worker.pid}" in text
    finally:
        worker.kill()
        worker.wait()
