"""Finding a project's run directories through the files (what the web app's rewards page lists)."""
from __future__ import annotations

from training.rundir import claim_run_dir, project_run_dirs


def test_run_dirs_are_found_newest_job_first_and_strays_ignored(tmp_path):
    first = claim_run_dir(tmp_path, "3")
    second = claim_run_dir(tmp_path, "12")
    (tmp_path / "notes").mkdir()
    (tmp_path / "x-abc").mkdir()
    (tmp_path / "7-file").write_text("not a folder")
    (tmp_path / "9-link").symlink_to(first.path)
    assert [(job, run.path) for job, run in project_run_dirs(tmp_path)] == [(12, second.path), (3, first.path)]
    assert project_run_dirs(tmp_path / "missing") == []
