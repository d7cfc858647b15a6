"""Dataset pages: access per role, upload without JavaScript, mapping, reports, rows, stats, export."""
from __future__ import annotations

import io
import json

import pyarrow.parquet as pq
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from webapp.datasets.models import Dataset, DatasetImport, DatasetRow, DatasetVersion, ImportStatus

pytestmark = pytest.mark.django_db

READ = {"admin": 200, "engineer": 200, "reviewer": 200, "viewer": 200, "outsider": 404}
WRITE = {"admin": 200, "engineer": 200, "reviewer": 403, "viewer": 403, "outsider": 404}


def pages(v):
    base = f"/p/acme/datasets/{v.dataset_id}/v{v.number}/"
    return {"list": "/p/acme/datasets/", "version": base, "row": base + "rows/4/", "stats": base + "stats/"}


@pytest.mark.parametrize("role", list(READ))
def test_read_pages_per_role(as_user, personas, version, role):
    client = as_user(personas[role])
    for name, url in pages(version).items():
        assert client.get(url).status_code == READ[role], (name, role)
    dataset_url = f"/p/acme/datasets/{version.dataset_id}/"
    assert client.get(dataset_url).status_code == (302 if READ[role] == 200 else 404)


@pytest.mark.parametrize("role", list(WRITE))
def test_import_and_export_pages_per_role(as_user, personas, version, role):
    client = as_user(personas[role])
    assert client.get("/p/acme/datasets/upload/").status_code == WRITE[role]
    export = pages(version)["version"] + "export/?format=jsonl"
    assert client.get(export).status_code == WRITE[role]
    record = DatasetImport.objects.get()
    for url in (f"/p/acme/datasets/imports/{record.pk}/", f"/p/acme/datasets/imports/{record.pk}/status/",
                f"/p/acme/datasets/imports/{record.pk}/bad-rows.csv"):
        assert client.get(url).status_code == WRITE[role], url


def test_anonymous_is_sent_to_login(client, version):
    assert client.get("/p/acme/datasets/").status_code == 302


def test_list_shows_datasets_and_the_empty_state(as_user, engineer, viewer, project):
    body = as_user(viewer).get("/p/acme/datasets/").content.decode()
    assert "No datasets yet" in body and "An engineer of this project can import one" in body
    assert "import_dataset FILE --project acme" in as_user(engineer).get("/p/acme/datasets/").content.decode()


def upload(client, filename, content, **fields):
    data = {"name": "qa", "split": "10%", "split_seed": 0, "column_map": "", **fields,
            "file": SimpleUploadedFile(filename, content)}
    return client.post("/p/acme/datasets/upload/", data)


def test_upload_without_javascript_then_redirect_to_the_version(as_user, engineer, pairs):
    content = "".join(json.dumps(p) + "\n" for p in pairs).encode()
    resp = upload(as_user(engineer), "pairs.jsonl", content, name="pairs")
    version = DatasetVersion.objects.get()
    assert resp.status_code == 302 and resp["Location"] == f"/p/acme/datasets/{version.dataset_id}/v1/"
    assert version.row_count == 4 and DatasetImport.objects.get().upload_path == ""


def test_upload_needing_a_mapping_shows_columns_preview_and_form(as_user, engineer):
    client = as_user(engineer)
    resp = upload(client, "qa.csv", b"question,answer\nWhat is 1+1?,2\nWhat is 2+2?,4\n")
    record = DatasetImport.objects.get()
    assert record.status == ImportStatus.NEEDS_MAPPING and resp["Location"] == f"/p/acme/datasets/imports/{record.pk}/"
    page = client.get(resp["Location"]).content.decode()
    assert "Map the columns" in page and "What is 1+1?" in page
    assert '<option value="question" selected>' in page  # the suggestion is pre-selected
    resp = client.post(resp["Location"], {"kind": "", "map_prompt": "question", "map_ground_truth": "answer"})
    version = DatasetVersion.objects.get()
    assert resp.status_code == 302 and version.row_count == 2 and version.dataset.kind == "prompts"


def test_failed_upload_shows_every_bad_row_and_downloads(as_user, engineer, pairs):
    client = as_user(engineer)
    rows = [json.dumps(p) for p in pairs] + ['{"prompt": "x", "chosen": "y", "rejected": "y"}', "oops"]
    resp = upload(client, "p.jsonl", ("\n".join(rows) + "\n").encode(), name="pairs")
    record = DatasetImport.objects.get()
    page = client.get(resp["Location"]).content.decode()
    assert "2 of 6 rows are invalid, so nothing was imported" in page and "chosen is identical to rejected" in page
    assert not Dataset.objects.exists()
    csv_text = client.get(f"/p/acme/datasets/imports/{record.pk}/bad-rows.csv").content.decode()
    assert csv_text.splitlines()[0] == "row,line,field,reason" and csv_text.splitlines()[1].startswith("5,5,rejected,")
    as_json = json.loads(client.get(f"/p/acme/datasets/imports/{record.pk}/bad-rows.json").content)
    assert [e["line"] for e in as_json] == [5, 6]


def test_upload_form_errors_are_shown_next_to_fields(as_user, engineer, settings):
    client = as_user(engineer)
    resp = upload(client, "x.jsonl", b'{"prompt": "a"}\n', name="", split="lots")
    body = resp.content.decode()
    assert resp.status_code == 200 and "This field is required" in body
    resp = upload(client, "x.jsonl", b'{"prompt": "a"}\n', column_map="question")
    assert "is not FIELD=COLUMN" in resp.content.decode()
    resp = upload(client, "empty.jsonl", b"")
    assert "The submitted file is empty" in resp.content.decode()
    settings.DATASET_MAX_UPLOAD_MB = 0
    resp = upload(client, "big.jsonl", b'{"prompt": "a", "ground_truth": "1"}\n' * 2000)
    assert resp.status_code == 413 and "upload limit" in resp.content.decode()


def test_version_page_keyset_pagination_filters_and_search(as_user, viewer, project, engineer, write):
    from webapp.datasets.services import dataset_import

    rows = [{"prompt": f"question {i}" + (" needle" if i % 10 == 3 else ""), "ground_truth": str(i),
             "data_source": "even" if i % 2 == 0 else "odd"} for i in range(120)]
    v = dataset_import(project=project, user=engineer, name="big", path=write("big.jsonl", rows), split="20")
    client = as_user(viewer)
    url = f"/p/acme/datasets/{v.dataset_id}/v1/"
    first = client.get(url)
    assert [r.index for r in first.context["page"].rows] == list(range(50))
    assert first.context["page"].next_after == 49 and first.context["page"].prev_before is None
    second = client.get(url + "?after=49")
    assert second.context["page"].rows[0].index == 50 and second.context["page"].prev_before == 50
    back = client.get(url + "?before=50")
    assert [r.index for r in back.context["page"].rows] == list(range(50))
    found = client.get(url + "?q=needle&data_source=odd")
    assert [r.index for r in found.context["page"].rows] == [3, 13, 23, 33, 43, 53, 63, 73, 83, 93, 103, 113]
    assert "after=" not in found.content.decode()
    val = client.get(url + "?split=val").context["page"].rows
    assert len(val) == 20 and all(r.split == "val" for r in val)
    long_ones = client.get(url + "?length_field=prompt&min_chars=16").context["page"].rows
    assert {r.index for r in long_ones} == {i for i in range(120) if len(rows[i]["prompt"]) >= 16}
    assert client.get(url + "?review_state=unreviewed").context["page"].rows[0].index == 0
    approved = client.get(url + "?review_state=approved")
    assert approved.context["page"].rows == [] or approved.context["review_enabled"]
    assert client.get(url + "?min_chars=abc").status_code == 200


def test_row_detail_escapes_html_and_shows_roles(as_user, viewer, version):
    body = as_user(viewer).get(pages(version)["row"]).content.decode()
    assert "<script>alert" not in body and "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in body
    assert "<img src=x" not in body and "&lt;img src=x onerror=alert(1)&gt;" in body
    assert 'class="msg msg-system"' in body and 'class="msg msg-user"' in body
    assert as_user(viewer).get(pages(version)["version"] + "rows/99/").status_code == 404


def test_stats_page_in_characters_and_tokens(as_user, viewer, version, project, tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from webapp.registry.models import ModelEntry

    body = as_user(viewer).get(pages(version)["stats"]).content.decode()
    assert "plotly/plotly.min.js" in body and 'id="prompt_chars"' in body and 'id="diff_chars"' in body
    assert "reward-hacking signal" in body and 'id="chosen-longer">20%' in body
    vocab = {c: i for i, c in enumerate(["<unk>", *sorted(set("abcdefghijklmnopqrstuvwxyz?<>/'()=+ 0123456789!.,"))])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>").save_pretrained(tmp_path / "tok")
    entry = ModelEntry.objects.create(project=project, name="chars", path=str(tmp_path / "tok"))
    resp = as_user(viewer).get(pages(version)["stats"] + f"?tokenizer={entry.pk}")
    assert resp.context["numbers"]["token_sample"] == 5 and "prompt_tokens" in resp.context["figures"]
    broken = ModelEntry.objects.create(project=project, name="broken", path=str(tmp_path / "nothing"))
    resp = as_user(viewer).get(pages(version)["stats"] + f"?tokenizer={broken.pk}")
    assert "Could not load a tokenizer" in resp.content.decode() and "prompt_tokens" not in resp.context["figures"]


@pytest.mark.parametrize("fmt", ["jsonl", "trl", "verl"])
def test_export_downloads(as_user, engineer, version, fmt):
    resp = as_user(engineer).get(pages(version)["version"] + f"export/?format={fmt}")
    assert resp.status_code == 200 and "attachment" in resp["Content-Disposition"]
    data = b"".join(resp.streaming_content)
    if fmt == "verl":
        assert pq.read_table(io.BytesIO(data)).num_rows == 5
    else:
        lines = [json.loads(x) for x in data.splitlines()]
        assert len(lines) == 5 and lines[0]["chosen"] == [{"role": "assistant", "content": "4"}]


def test_export_with_a_bad_format_explains(as_user, engineer, version):
    resp = as_user(engineer).get(pages(version)["version"] + "export/?format=xml", follow=True)
    assert "Choose an export format" in resp.content.decode()


def test_import_status_json(as_user, engineer, version):
    record = DatasetImport.objects.get()
    data = as_user(engineer).get(f"/p/acme/datasets/imports/{record.pk}/status/").json()
    assert data["status"] == "succeeded" and data["progress"] == 1.0 and data["rows"] == 5
    assert data["version_url"] == pages(version)["version"]


def test_rows_of_other_projects_are_not_reachable(as_user, engineer, version, django_user_model):
    from webapp.core.models import Membership, Project

    other = Project.objects.create(slug="other", name="Other")
    Membership.objects.create(project=other, user=engineer, role="admin")
    assert as_user(engineer).get(f"/p/other/datasets/{version.dataset_id}/v1/").status_code == 404
    assert DatasetRow.objects.count() == 5


def test_review_state_filter_with_the_review_app(as_user, viewer, version):
    from django.apps import apps

    try:
        PairState = apps.get_model("review", "PairState")
    except LookupError:
        pytest.skip("the review app has no PairState model")
    rows = list(DatasetRow.objects.filter(version=version).order_by("index"))
    # Prepare the "unreviewed" state of each pair as the review app does; rows without one count as unreviewed.
    from webapp.review.services import ensure_pair_states

    ensure_pair_states(version=version)
    PairState.objects.filter(row=rows[1]).update(state="approved")
    PairState.objects.filter(row=rows[3]).update(state="flagged")
    PairState.objects.filter(row__in=[rows[0], rows[2]]).delete()
    client = as_user(viewer)

    def indexes(state):
        return [r.index for r in client.get(pages(version)["version"] + f"?review_state={state}").context["page"].rows]

    assert indexes("approved") == [1] and indexes("flagged") == [3] and indexes("unreviewed") == [0, 2, 4]
    body = client.get(pages(version)["version"]).content.decode()
    assert "<th scope=\"col\">Review</th>" in body
    assert client.get(pages(version)["row"].replace("rows/4/", "rows/3/")).context["row"].review_state == "flagged"
