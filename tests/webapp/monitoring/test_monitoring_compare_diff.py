"""Compare shows what differs: a table of the settings, data, reward and base-model rows that differ (the rest
collapsed under "same in all"), and legend labels that carry the differences."""
from __future__ import annotations

import pytest

from webapp.monitoring import compare

pytestmark = pytest.mark.django_db


def test_flatten_uses_the_hparams_keys():
    flat = compare.flatten({"hp": {"lr": 1e-6, "lora": {"rank": 8}}, "verl": {"rollout_engine": "hf"}})
    assert flat == {"lr": 1e-6, "lora.rank": 8, "verl.rollout_engine": "hf"}
    assert compare.fmt(1e-6) == "1e-06" and compare.fmt(True) == "yes" and compare.fmt(None) == "—"


def test_differences_split_rows_and_labels_carry_only_what_differs():
    a = {("Run", "kind", "Kind"): "grpo", ("Settings", "lr", "Learning rate (lr)"): "1e-06",
         ("Settings", "seed", "Seed (seed)"): "1", ("Data", "data", "Dataset version"): "arith v1"}
    b = {**a, ("Settings", "lr", "Learning rate (lr)"): "5e-06"}
    differing, same = compare.differences([a, b])
    assert [r.key for r in differing] == ["lr"] and differing[0].values == ("1e-06", "5e-06")
    assert [r.key for r in same] == ["kind", "data", "seed"]  # groups in order, settings by key
    assert compare.legend_labels([3, 4], ["grpo", "grpo"], differing) == ["#3 grpo · lr 1e-06", "#4 grpo · lr 5e-06"]
    # a setting only one run has counts as "—" for the other; many differences end in "+N more"
    c = {**b, ("Settings", "new", "new"): "x", ("Settings", "seed", "Seed (seed)"): "2",
         ("Data", "data", "Dataset version"): "arith v2"}
    differing, _ = compare.differences([a, c])
    assert [r.key for r in differing] == ["data", "lr", "new", "seed"]
    label = compare.legend_labels([3, 5], ["grpo", "grpo"], differing)[1]
    assert label == "#5 grpo · data arith v2 · lr 5e-06 · new x · +1 more"


def _config(lr: float) -> dict:
    return {"hp": {"lr": lr, "kl_coef": 0.02, "seed": 1}, "guard_rules": [{"rule": "kl", "enabled": False}]}


def test_compare_page_and_api_show_the_differing_settings_and_distinct_labels(make_job, points, viewer, as_user,
                                                                             api_for, project):
    a = make_job("grpo · demo-tiny · demo-cpu", config=_config(1e-6))
    b = make_job("grpo · demo-tiny · demo-cpu", config=_config(5e-6))
    for job in (a, b):
        points(job, "critic/score/mean", [0.1, 0.2])
    for key, value in [("win_rate", 0.625), ("win_rate_lo", 0.3), ("win_rate_hi", 0.9), ("win_rate_n", 4),
                       ("win_rate_wins", 1), ("win_rate_ties", 3), ("win_rate_losses", 0)]:
        points(a, f"val-core/arith/{key}", [value], start_step=2)
    body = as_user(viewer).get(f"/p/{project.slug}/monitor/compare/",
                               {"jobs": [a.pk, b.pk], "name": "val-core/arith/win_rate"}).content.decode()
    table = body.split('id="compare-diff"')[1]
    diff_rows = table.split('id="compare-same"')[0]
    assert 'data-diff-row="lr"' in diff_rows and "Learning rate (lr)" in diff_rows
    assert "1e-06" in diff_rows and "5e-06" in diff_rows
    assert 'data-diff-row="kl_coef"' not in diff_rows  # the same in both: collapsed
    assert "Same in all (" in table and "KL coefficient (kl_coef)" in table.split('id="compare-same"')[1]
    assert f"#{a.pk} grpo · lr 1e-06" in diff_rows and f"#{b.pk} grpo · lr 5e-06" in diff_rows
    assert "1 won" in diff_rows and "none logged" in diff_rows  # b has no win rate
    assert "Tie rule: a tie counts as half a win" in body
    runs = api_for(viewer).get(f"/api/projects/{project.slug}/monitor/compare/",
                               {"jobs": f"{a.pk},{b.pk}", "name": "critic/score/mean"}).json()["runs"]
    assert [r["label"] for r in runs] == [f"#{a.pk} grpo · lr 1e-06", f"#{b.pk} grpo · lr 5e-06"]


def test_data_reward_and_base_model_rows(make_job, project):
    from webapp.datasets.models import Dataset, DatasetVersion
    from webapp.registry.models import ModelEntry

    ds = Dataset.objects.create(project=project, name="arith", kind="prompts")
    v1 = DatasetVersion.objects.create(dataset=ds, number=1)
    v2 = DatasetVersion.objects.create(dataset=ds, number=2)
    m = ModelEntry.objects.create(project=project, name="tiny", path="/x")
    a = make_job(config=_config(1e-6), dataset_version=v1, base_model=m)
    b = make_job(config=_config(1e-6), dataset_version=v2, base_model=m)
    table = compare.compare_table(compare.load_jobs(project, [a.pk, b.pk]))
    assert [(r.group, r.values) for r in table["differing"]] == [("Data", ("arith v1", "arith v2"))]
    assert any(r.key == "base" and r.values[0] == f"tiny (#{m.pk})" for r in table["same"])
