"""training_rows: what a job trains on after review (swaps and edits applied, exclusions counted)."""
from __future__ import annotations

import json

import pytest

from webapp.core.services import ApplicationError
from webapp.datasets.models import DatasetRow
from webapp.review import services
from webapp.review.selectors import expand_ranges, training_rows

pytestmark = pytest.mark.django_db


def _row(version, index):
    return DatasetRow.objects.get(version=version, index=index)


@pytest.fixture
def reviewed(project, version, reviewer, reviewer2):
    """Rows 0..7: approve, swap, reject, flag, conflict, then three unreviewed."""
    services.ensure_pair_states(version=version)
    submit = services.review_submit
    submit(actor=reviewer, project=project, row=_row(version, 0), choice="approve")
    submit(actor=reviewer, project=project, row=_row(version, 1), choice="swap")
    submit(actor=reviewer, project=project, row=_row(version, 2), choice="reject")
    submit(actor=reviewer, project=project, row=_row(version, 3), choice="flag", reason="unsafe")
    project.review_overlap = 2
    project.save()
    submit(actor=reviewer, project=project, row=_row(version, 4), choice="approve")
    submit(actor=reviewer2, project=project, row=_row(version, 4), choice="reject")
    services.response_edit(actor=reviewer, project=project, row=_row(version, 0), side="chosen", text="Edited good 0")
    services.response_edit(actor=reviewer, project=project, row=_row(version, 1), side="rejected", text="Edited bad 1")
    services.response_edit(actor=reviewer, project=project, row=_row(version, 2), side="chosen", text="never used")
    return version


def test_approved_pairs_with_swaps_and_edits(reviewed):
    selection = training_rows(reviewed)
    assert selection.rows == [
        {"prompt": "Question 0?", "chosen": "Edited good 0", "rejected": "Bad answer 0", "data_source": "math"},
        # Swapped: the (edited) rejected response becomes the chosen one.
        {"prompt": "Question 1?", "chosen": "Edited bad 1", "rejected": "Good answer 1", "data_source": "code"},
    ]
    assert selection.included == 2
    assert selection.excluded == {"rejected": 1, "flagged": 1, "conflict": 1, "unreviewed": 3}
    ids = {i: _row(reviewed, i).pk for i in range(8)}
    m = selection.manifest
    assert m["included"] == 2 and m["excluded"] == selection.excluded and m["include_unreviewed"] is False
    assert m["swapped"] == 1 and m["edited"] == 2
    ranges = m["row_id_ranges"]
    assert list(expand_ranges(ranges["included"])) == [ids[0], ids[1]]
    assert list(expand_ranges(ranges["unreviewed"])) == [ids[5], ids[6], ids[7]]
    assert list(expand_ranges(ranges["conflict"])) == [ids[4]]
    assert ranges["unreviewed"] == [[ids[5], ids[7]]]  # contiguous ids collapse into one range
    json.dumps(m)  # storable as JSON on the job
    assert selection.splits == ["train", "train"] and selection.val_rows == []


def test_unreviewed_pairs_on_request(reviewed):
    selection = training_rows(reviewed, include_unreviewed=True)
    assert selection.included == 5
    assert selection.excluded == {"rejected": 1, "flagged": 1, "conflict": 1}
    assert selection.manifest["included_unreviewed"] == 3
    assert selection.rows[-1] == {"prompt": "Question 7?", "chosen": "Good answer 7", "rejected": "Bad answer 7",
                                  "data_source": "code"}
    assert selection.val_rows == [selection.rows[-1]]  # row 7 is a validation row
    assert len(selection.train_rows) == 4


def test_a_version_nobody_opened_counts_as_unreviewed(project, make):
    version = make(project, name="fresh", rows=3)
    selection = training_rows(version)
    assert (selection.included, selection.excluded) == (0, {"unreviewed": 3})
    assert training_rows(version, include_unreviewed=True).included == 3


def test_message_list_responses_keep_their_structure(project, make, reviewer):
    version = make(project, name="chat", rows=1)
    row = _row(version, 0)
    row.prompt = [{"role": "user", "content": "Hi"}]
    row.chosen = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]
    row.rejected = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Go away."}]
    row.save()
    services.ensure_pair_states(version=version)
    services.review_submit(actor=reviewer, project=project, row=row, choice="approve")
    services.response_edit(actor=reviewer, project=project, row=row, side="chosen", text="Hello! How can I help?")
    out = training_rows(version).rows[0]
    assert out["prompt"] == [{"role": "user", "content": "Hi"}]
    assert out["chosen"] == [{"role": "user", "content": "Hi"},
                             {"role": "assistant", "content": "Hello! How can I help?"}]
    assert out["rejected"] == row.rejected


def test_prompt_sets_include_every_row(project, make):
    version = make(project, name="arith", kind="prompts", rows=3)
    selection = training_rows(version)
    assert selection.included == 3 and selection.excluded == {}
    assert selection.rows[0] == {"prompt": [{"role": "user", "content": "0+1="}], "ground_truth": "1",
                                 "data_source": "arith", "ability": "math", "extra_info": {"i": 0}, "reference": None}
    assert selection.manifest["row_id_ranges"]["included"] == [[_row(version, 0).pk, _row(version, 2).pk]]


def test_a_version_still_importing_is_refused(project, make):
    with pytest.raises(ApplicationError, match="not ready"):
        training_rows(make(project, name="wip", status="importing"))
