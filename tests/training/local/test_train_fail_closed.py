"""A local training run whose host cannot isolate reward code stops at once and says why in one line."""
from __future__ import annotations

from training.local.train import main


def test_the_trainer_refuses_to_score_without_isolation_and_says_why(make_run, broken_bwrap, capsys):
    run = make_run("grpo", max_steps=2, test_freq=0, save_freq=0)
    assert main(["--run-dir", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: Reward code was not run: the sandbox cannot isolate it on this host")
    assert "apt-get install bubblewrap" in err and "Traceback" not in err
    assert not (run / "samples" / "rollout").exists() or not any((run / "samples" / "rollout").iterdir())
