"""The launch form's model fit (services/model_fit.py): the settings a preset made for another model still holds,
the preset made for the chosen one, and lengths within its context when no preset fits it."""
from __future__ import annotations

import json

import pytest

from training import hparams as cfg
from webapp.registry.models import ModelEntry, ModelKind
from webapp.runs.services.model_fit import fit_lengths, model_fit

pytestmark = pytest.mark.django_db


def model(project, tmp_path, name, parameters, context):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "max_position_embeddings": context}))
    return ModelEntry.objects.create(project=project, name=name, kind=ModelKind.CAUSAL_LM, path=str(folder),
                                     num_parameters=parameters)


def form_values(kind, preset, **changed):
    config = cfg.base_config(kind, preset)
    values = {s.form_name: cfg.value_of(config, s.key) for s in cfg.SETTINGS}
    return {k: "" if v is None else str(v) for k, v in {**values, **changed}.items()}


def test_a_real_model_on_the_demo_preset_is_offered_the_preset_made_for_it(project, tmp_path):
    smol = model(project, tmp_path, "smollm2", 134_515_008, 8192)
    fit = model_fit(kind="grpo", backend="local", preset="demo-cpu", model=smol,
                    values=form_values("grpo", "demo-cpu", max_response_length="64"))
    assert fit["fits"] is False and fit["suggested"] == "smollm2-cpu" and fit["made_for"] == "the demo's tiny models"
    rows = {r["name"]: (r["value"], r["suggested"]) for r in fit["settings"]}
    assert rows["lr"] == (1e-3, 1e-6) and rows["max_prompt_length"] == (8, 192) and rows["max_seq_len"] == (16, 320)
    assert rows["batch_size"] == (16, 8) and rows["group_size"] == (8, 4)
    assert "max_response_length" not in rows  # the user's own value is theirs
    assert fit["lengths"] is None and not fit["too_long"]
    lora = model_fit(kind="grpo", backend="local", preset="demo-cpu", model=smol,
                     values=form_values("grpo", "demo-cpu", lora_rank="8"))
    assert lora["suggested"] == "smollm2-cpu-lora"
    assert model_fit(kind="grpo", backend="local", preset="smollm2-cpu", model=smol,
                     values=form_values("grpo", "smollm2-cpu")) is None
    every = dict.fromkeys(form_values("grpo", "demo-cpu"), "0.5")  # every setting the user's: nothing to say
    assert model_fit(kind="grpo", backend="local", preset="demo-cpu", model=smol, values=every) is None


def test_the_demo_model_on_a_real_preset_and_lengths_past_the_context(project, tmp_path):
    tiny = model(project, tmp_path, "tiny", 40_000, 32)
    fit = model_fit(kind="grpo", backend="local", preset="smollm2-cpu", model=tiny,
                    values=form_values("grpo", "smollm2-cpu"))
    assert fit["suggested"] == "demo-cpu" and fit["too_long"] and fit["max_seq_len"] == 320 and fit["context"] == 32
    assert fit["lengths"] is None  # the demo preset's lengths fit it already
    assert model_fit(kind="grpo", backend="local", preset="demo-cpu", model=tiny,
                     values=form_values("grpo", "demo-cpu")) is None

    big = model(project, tmp_path, "two-b", 2_000_000_000, 1024)  # no preset made for it: lengths that fit
    fit = model_fit(kind="grpo", backend="verl", preset="qwen2.5-0.5b-1gpu", model=big,
                    values=form_values("grpo", "qwen2.5-0.5b-1gpu"))
    assert fit["suggested"] is None and fit["too_long"] and fit["settings"][0]["suggested"] is None
    assert fit["lengths"] == {"max_prompt_length": 341, "max_response_length": 682, "max_seq_len": 1023}
    assert fit_lengths({"max_prompt_length": "", "max_response_length": "4"}, 10) is None


def test_a_model_of_unknown_size_is_judged_by_its_context_only(project, tmp_path):
    unknown = model(project, tmp_path, "unknown", None, 4096)  # no safetensors to count
    assert model_fit(kind="grpo", backend="local", preset="demo-cpu", model=unknown,
                     values=form_values("grpo", "demo-cpu")) is None
    small = model(project, tmp_path, "small-context", None, 128)
    fit = model_fit(kind="grpo", backend="local", preset="smollm2-cpu", model=small,
                    values=form_values("grpo", "smollm2-cpu"))
    assert fit["fits"] is None and fit["settings"] == [] and fit["lengths"] == {
        "max_prompt_length": 76, "max_response_length": 51, "max_seq_len": 127}
