"""Import errors a user can act on: one line number per bad row, and a failed import that was redone leaves the
"needs attention" list."""
from __future__ import annotations

import json
import re

from django.core.files.uploadedfile import SimpleUploadedFile

from webapp.datasets.models import DatasetImport, ImportStatus

GOOD = [{"prompt": f"q{i}", "chosen": "yes", "rejected": "no"} for i in range(3)]


def _post(client, name: str, body: str, filename: str = "pairs.jsonl"):
    return client.post("/p/acme/datasets/upload/", {"file": SimpleUploadedFile(filename, body.encode()),
                                                     "name": name, "split": "10%", "split_seed": 0}, follow=True)


def _lines(rows) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def test_a_bad_line_is_reported_with_one_line_number(as_user, engineer):
    c = as_user(engineer)
    body = _lines(GOOD[:2]) + '{"prompt": "q", "chosen": "yes"\n' + '{"prompt": "q", , "chosen": 1}\n'
    page = _post(c, "pairs", body).content.decode()
    record = DatasetImport.objects.get()
    assert record.status == ImportStatus.FAILED
    reasons = {e["line"]: e["reason"] for e in record.report["errors"]}
    assert re.fullmatch(r"malformed JSON: .+ at the end of the line", reasons[3]), reasons
    assert re.fullmatch(r"malformed JSON: .+ at character 17", reasons[4]), reasons  # the second comma
    for reason in reasons.values():
        assert "line" not in reason.replace("the end of the line", ""), reason  # the Line column says which
        assert reason in page


def test_a_failed_import_redone_leaves_the_attention_list(as_user, engineer):
    c = as_user(engineer)
    _post(c, "pairs", _lines(GOOD) + "not json\n", filename="broken.jsonl")
    _post(c, "other", "also not json\n", filename="other.jsonl")
    listing = c.get("/p/acme/datasets/").content.decode()
    assert "need attention" in listing and "broken.jsonl" in listing and "other.jsonl" in listing

    _post(c, "pairs", _lines(GOOD), filename="fixed.jsonl")  # the same dataset name, now a good file
    listing = c.get("/p/acme/datasets/").content.decode()
    assert "broken.jsonl" not in listing  # redone under the same name
    assert "other.jsonl" in listing  # still failed, still listed
