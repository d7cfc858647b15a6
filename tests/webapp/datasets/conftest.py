"""Helpers for the dataset tests: write files of any format in the test's temporary folder."""
from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    """Persona logins need a password hash; PBKDF2 costs about a second per user on these CPUs."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def write(tmp_path):
    """`write(name, rows)` writes JSONL (or a JSON array for *.json); `write(name, b"...")` writes bytes."""

    def make(name: str, content) -> Path:
        path = tmp_path / "files" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        elif isinstance(content, str):
            path.write_text(content, encoding="utf-8")
        elif name.endswith(".json"):
            path.write_text(json.dumps(content), encoding="utf-8")
        elif name.endswith(".parquet"):
            import pyarrow as pa
            import pyarrow.parquet as pq

            pq.write_table(pa.Table.from_pylist(content), path)
        else:
            path.write_text("".join(json.dumps(r) + "\n" for r in content), encoding="utf-8")
        return path

    return make


PAIRS = [
    {"prompt": "What is 2+2?", "chosen": "4", "rejected": "5", "data_source": "math"},
    {"prompt": "Capital of France?", "chosen": "Paris", "rejected": "Lyon", "data_source": "geo"},
    {"prompt": "Say hi", "chosen": "Hi!", "rejected": "No.", "data_source": "chat"},
    {"prompt": "3*3?", "chosen": "9", "rejected": "6", "data_source": "math"},
]
PROMPTS = [
    {"prompt": "1+1=", "ground_truth": "2", "data_source": "arith", "ability": "math", "extra_info": {"level": 1}},
    {"prompt": "2+3=", "ground_truth": "5", "data_source": "arith", "ability": "math", "extra_info": {"level": 2}},
    {"prompt": "4+4=", "ground_truth": "8", "data_source": "arith", "ability": "math", "extra_info": {"level": 1}},
]


@pytest.fixture
def pairs():
    return [dict(r) for r in PAIRS]


@pytest.fixture
def prompt_rows():
    return [json.loads(json.dumps(r)) for r in PROMPTS]


@pytest.fixture
def version(db, project, engineer, write, pairs):
    """A ready preference version ('prefs' v1) with one row that holds HTML and a chat prompt."""
    from webapp.datasets.services import dataset_import

    rows = [*pairs, {"prompt": [{"role": "system", "content": "Be safe"},
                                {"role": "user", "content": "<script>alert('x')</script>"}],
                     "chosen": "<b>bold</b> answer", "rejected": "<img src=x onerror=alert(1)>", "data_source": "web"}]
    rows = [{**r,
             "prompt": r["prompt"] if isinstance(r["prompt"], list) else [{"role": "user", "content": r["prompt"]}],
             "chosen": [{"role": "assistant", "content": r["chosen"]}],
             "rejected": [{"role": "assistant", "content": r["rejected"]}]} for r in rows]
    return dataset_import(project=project, user=engineer, name="prefs", path=write("prefs.jsonl", rows), split="1")


@pytest.fixture
def personas(admin_user, engineer, reviewer, viewer, outsider):
    return {"admin": admin_user, "engineer": engineer, "reviewer": reviewer, "viewer": viewer, "outsider": outsider}
