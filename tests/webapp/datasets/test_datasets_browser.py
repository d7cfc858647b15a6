"""In Chromium: drag-and-drop upload with progress, the mapping form, stats charts, safe row rendering."""
from __future__ import annotations

import json

import pytest

from tests.browser_support import login
from tests.conftest import PASSWORD

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

DROP_FILE = """([name, text]) => {
  const dt = new DataTransfer();
  dt.items.add(new File([text], name, {type: 'application/octet-stream'}));
  const form = document.getElementById('upload-form');
  form.dispatchEvent(new DragEvent('drop', {dataTransfer: dt, bubbles: true, cancelable: true}));
}"""


WATCH_BAR = """() => {
  const bar = document.getElementById('upload-bar');
  new MutationObserver(() => sessionStorage.setItem('upload-bar', bar.getAttribute('aria-valuenow')))
    .observe(bar, {attributes: true});
}"""


def test_drag_and_drop_upload_then_stats_and_rows(page, live_server, engineer, shot, settings):  # noqa: F811
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    login(page, live_server, "erin", PASSWORD)
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(f"{live_server.url}/p/acme/datasets/upload/")
    rows = [{"prompt": f"q{i} <script>alert(1)</script>", "chosen": "a" * (i + 5), "rejected": "b" * 3,
             "data_source": "web" if i % 2 else "book"} for i in range(40)]
    page.evaluate(DROP_FILE, ["pairs.jsonl", "".join(json.dumps(r) + "\n" for r in rows)])
    assert "pairs.jsonl" in page.inner_text("#dropzone-file")
    assert page.input_value("#id_name") == "pairs"  # named after the file
    shot(page, "upload-ready")
    page.evaluate(WATCH_BAR)
    with page.expect_navigation(url="**/v1/"):
        page.click("#upload-submit")
    assert page.locator("table tbody tr").count() == 40
    shot(page, "version")
    assert page.evaluate("sessionStorage.getItem('upload-bar')") == "100"  # the upload bar filled up
    page.click("text=Stats")
    page.wait_for_selector("#chart-diff_chars .main-svg")
    assert page.locator("#chart-response_chars .barlayer .trace").count() == 2
    assert page.inner_text("#chosen-longer") == "100%"
    shot(page, "stats")
    page.goto(page.url.replace("stats/", "rows/0/"))
    assert "<script>alert(1)</script>" in page.inner_text("main") and dialogs == []
    shot(page, "row")


def test_mapping_in_the_browser_and_upload_errors(page, live_server, engineer, settings, shot):  # noqa: F811
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    login(page, live_server, "erin", PASSWORD)
    page.goto(f"{live_server.url}/p/acme/datasets/upload/")
    page.click("#upload-submit")
    assert "Choose a file" in page.inner_text("#upload-error")
    page.evaluate(DROP_FILE, ["qa.csv", "question,answer\r\nWhat is 1+1?,2\r\nWhat is 2+2?,4\r\n"])
    page.fill("#id_name", "qa")
    with page.expect_navigation(url="**/imports/*/"):
        page.click("#upload-submit")
    assert "Map the columns" in page.inner_text("main") and "What is 2+2?" in page.inner_text("main")
    assert page.input_value("#id_map_prompt") == "question"
    shot(page, "mapping")
    with page.expect_navigation(url="**/v1/"):
        page.click("text=Import with this mapping")
    assert page.locator("table tbody tr").count() == 2


def test_a_queued_import_shows_the_ingest_bar_until_a_worker_finishes(page, live_server, engineer,  # noqa: F811
                                                                        settings, monkeypatch):
    from webapp.datasets.models import DatasetImport
    from webapp.datasets.services import import_run

    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.DATASET_SYNC_IMPORT_MB = 0  # every upload is queued for a worker
    monkeypatch.setattr("webapp.datasets.services.enqueue", lambda *a, **kw: None)  # the test plays the worker
    login(page, live_server, "erin", PASSWORD)
    page.goto(f"{live_server.url}/p/acme/datasets/upload/")
    page.evaluate(DROP_FILE, ["p.jsonl", '{"prompt": "q", "chosen": "a", "rejected": "b"}\n' * 3])
    page.click("#upload-submit")
    page.wait_for_selector("#ingest-progress:not([hidden])")
    page.wait_for_function("document.getElementById('ingest-text').textContent.includes('Waiting for a worker')")
    with page.expect_navigation(url="**/v1/"):
        import_run(import_id=DatasetImport.objects.get().pk)
    assert page.locator("table tbody tr").count() == 3
