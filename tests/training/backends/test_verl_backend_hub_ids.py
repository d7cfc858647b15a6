"""Hub ids are accepted for GPU workers with hub access; anything else must be an absolute folder."""
from __future__ import annotations

import pytest

from training.backends.base import BackendError
from training.backends.verl import _check_model_dir


def test_hub_id_is_accepted():
    _check_model_dir("model", "Qwen/Qwen2.5-0.5B-Instruct")


@pytest.mark.parametrize("bad", ["", "relative/../../etc", "just-a-name", "./models/x"])
def test_relative_paths_and_bare_names_are_refused(bad):
    with pytest.raises(BackendError, match="absolute path"):
        _check_model_dir("model", bad)


def test_absolute_folder_without_config_is_refused(tmp_path):
    with pytest.raises(BackendError, match="no config.json"):
        _check_model_dir("model", str(tmp_path))
