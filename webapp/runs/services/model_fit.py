"""Whether the launch form's preset was made for its chosen model, and the settings that fit the model instead.

A preset sizes its lr, batch and lengths for one kind of model (`training.presets`, "model"). When the chosen
model is of another size, the form lists the settings that still hold the preset's values and offers the preset
made for that size; when the lengths pass the model's context, it offers lengths within it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from training import hparams as cfg
from training.presets import MODEL_SETTINGS, PRESETS, made_for, preset_for
from webapp.registry.models import ModelEntry
from webapp.registry.services import count_parameters
from webapp.runs.services.plan import model_context_length

LENGTHS = ("max_prompt_length", "max_response_length", "max_seq_len")


def _same(a: Any, b: Any) -> bool:
    a, b = ("" if a is None else a), ("" if b is None else b)
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return str(a).strip().lower() == str(b).strip().lower()


def _preset_values(kind: str, preset: str) -> dict[str, Any]:
    config = cfg.base_config(kind, preset)
    return {key: cfg.value_of(config, key) for key in MODEL_SETTINGS}


def model_parameters(model: ModelEntry) -> int | None:
    return model.num_parameters or (count_parameters(Path(model.path)) if model.path else None)


def fit_lengths(values: dict[str, Any], context: int) -> dict[str, int] | None:
    """The three lengths scaled into the model's context, the prompt/response split kept."""
    try:
        prompt, response = int(float(values["max_prompt_length"])), int(float(values["max_response_length"]))
    except (TypeError, ValueError):
        return None
    scale = min(1.0, context / max(1, prompt + response))
    prompt, response = max(1, int(prompt * scale)), max(1, int(response * scale))
    return {"max_prompt_length": prompt, "max_response_length": response, "max_seq_len": prompt + response}


def model_fit(*, kind: str, backend: str, preset: str, model: ModelEntry | None,
              values: dict[str, Any]) -> dict[str, Any] | None:
    """What the form says about the preset and the model (None: nothing to say). `values`: the form's values
    by form name (a setting the user changed is theirs, not the preset's, and is left alone)."""
    if model is None or preset not in PRESETS:
        return None
    parameters, context = model_parameters(model), model_context_length(model)
    current = {key: values.get(cfg.BY_KEY[key].form_name) for key in MODEL_SETTINGS}
    mine = _preset_values(kind, preset)
    lora = bool(current.get("lora.rank") not in (None, "", "0", 0))
    suggested = preset_for(parameters, backend, lora) if made_for(preset, parameters) is False else None
    theirs = _preset_values(kind, suggested) if suggested else {}
    rows = []
    for key in MODEL_SETTINGS:
        setting = cfg.BY_KEY[key]
        if not setting.offered(kind, backend) or not _same(current[key], mine[key]):
            continue
        if suggested and _same(theirs[key], mine[key]):
            continue
        rows.append({"name": setting.form_name, "label": setting.label, "value": mine[key],
                     "suggested": theirs.get(key)})
    try:
        seq = int(float(current["max_seq_len"]))
    except (TypeError, ValueError):
        seq = None
    too_long = bool(context and seq and seq > context)
    if not (too_long or (made_for(preset, parameters) is False and rows)):
        return None
    lengths = fit_lengths(current, context) if too_long and not suggested else None
    return {"model": model.name, "parameters": parameters, "context": context, "preset": preset,
            "made_for": PRESETS[preset].get("model", {}).get("label", ""), "fits": made_for(preset, parameters),
            "settings": rows if made_for(preset, parameters) is False else [], "suggested": suggested,
            "too_long": too_long, "max_seq_len": seq, "lengths": lengths}
