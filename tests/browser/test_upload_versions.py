"""Uploading under an existing dataset's name: the form says, before the upload, that it adds version N and offers a
new name; the result page says which happened."""
from __future__ import annotations

import json

import pytest

from tests.browser.browser_helpers import PASSWORD, write_jsonl
from tests.browser_support import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ROWS = [{"prompt": f"q{i}", "chosen": "good " * (i + 1), "rejected": "bad"} for i in range(6)]
DROP_FILE = """([name, text]) => {
  const dt = new DataTransfer();
  dt.items.add(new File([text], name, {type: 'application/octet-stream'}));
  document.getElementById('upload-form').dispatchEvent(
    new DragEvent('drop', {dataTransfer: dt, bubbles: true, cancelable: true}));
}"""


def _drop(page, name: str) -> None:
    page.evaluate(DROP_FILE, [name, "".join(json.dumps(r) + "\n" for r in ROWS)])


def test_existing_name_adds_a_version_or_takes_a_new_name(page, live_server, project, engineer, tmp_path, shot):
    from webapp.datasets.models import Dataset
    from webapp.datasets.services import dataset_import

    engineer.set_password(PASSWORD)
    engineer.save()
    dataset_import(project=project, user=engineer, name="pairs", path=write_jsonl(tmp_path / "pairs.jsonl", ROWS))
    login(page, live_server, engineer.username, PASSWORD)
    upload = f"{live_server.url}/p/acme/datasets/upload/"

    # A file named like the existing dataset: the form warns before anything is sent.
    page.goto(upload)
    page.wait_for_load_state("load")
    _drop(page, "pairs.jsonl")
    assert page.input_value("#id_name") == "pairs"
    note = page.locator("#name-note")
    assert "already exists" in note.inner_text() and "will add version 2" in note.inner_text()
    shot(page, "existing-name")
    with page.expect_navigation(url="**/v2/"):
        page.click("#upload-submit")
    assert "Version 2, added to the existing dataset “pairs”" in page.locator(".version-origin").inner_text()
    assert Dataset.objects.get(name="pairs").versions.count() == 2

    # Again, now taking the offered new name: a new dataset, and its page says so.
    page.goto(upload)
    page.wait_for_load_state("load")
    _drop(page, "pairs.jsonl")
    assert "will add version 3" in note.inner_text()
    offer = page.locator("#name-fresh")
    assert offer.inner_text() == "Use a new name instead: pairs-2"
    offer.click()
    assert page.input_value("#id_name") == "pairs-2"
    assert "creates the dataset “pairs-2”" in note.inner_text() and offer.is_hidden()
    with page.expect_navigation(url="**/v1/"):
        page.click("#upload-submit")
    assert "The first version of a new dataset" in page.locator(".version-origin").inner_text()
    assert Dataset.objects.get(name="pairs").versions.count() == 2
    assert Dataset.objects.get(name="pairs-2").versions.count() == 1
    shot(page, "new-dataset")


def test_upload_without_javascript_says_which_happened(as_user, project, engineer, tmp_path):
    """The plain form post (no script) reports the same in its message."""
    from django.core.files.uploadedfile import SimpleUploadedFile

    c = as_user(engineer)
    body = "".join(json.dumps(r) + "\n" for r in ROWS).encode()
    for expected in ("into the new dataset “pairs”", "as version 2 of the existing dataset “pairs”"):
        resp = c.post("/p/acme/datasets/upload/", {"file": SimpleUploadedFile("pairs.jsonl", body), "name": "pairs",
                                                    "split": "10%", "split_seed": 0}, follow=True)
        assert expected in resp.content.decode()
