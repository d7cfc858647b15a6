"""The New job form survives garbage in every field: never a 500, always an error on the field it came from.

Every field of the form (inputs, every setting, the health rules, the human-evaluation schedule, the reward
table) gets 0, a negative number, a huge number, text and an empty value, on the review step and on the live
preview. Values that are legitimate for a field (0 = "never" for save_freq, a blank optional setting) must
pass without an error on that field; every other one must be refused on it.
"""
from __future__ import annotations

import pytest

from training.guard_rules import BUILTIN
from training.hparams import SETTINGS
from webapp.runs.forms import HUMAN_EVAL_FIELDS, RULE_PARTS
from webapp.runs.models import Job

pytestmark = pytest.mark.django_db

ZERO, NEGATIVE, HUGE, TEXT, EMPTY = "0", "-1", "999999999999", "abc", ""
VALUES = (ZERO, NEGATIVE, HUGE, TEXT, EMPTY)

# What each field legitimately accepts among VALUES (everything else must be refused on the field).
FREE_TEXT = {"name", "lora_targets"}  # any of VALUES is a possible name
ZERO_OK = FREE_TEXT | {"save_freq", "test_freq", "warmup_steps", "weight_decay", "entropy_coeff", "kl_coef", "seed",
                       "lora_rank", "lora_alpha", "distill_alpha", "he_every", "he_reward_rise",
                       "overlong_prompt_warn"} | {f"rule_{n}_max_restores" for n in BUILTIN}
TEXT_OK = HUGE_OK = NEGATIVE_OK = FREE_TEXT
EMPTY_OK = {"name", "teacher_model", "he_every", "he_against", "he_items", "he_dataset_version", "he_split",
            "he_reward_rise"} | {s.form_name for s in SETTINGS if s.optional} \
    | {f"rule_{n}_{part}" for n in BUILTIN for part in RULE_PARTS}
SKIP = {"include_unreviewed"} | {s.form_name for s in SETTINGS if s.type == "bool"} | {f"rule_{n}" for n in BUILTIN} \
    | {f"rule_{n}_new_seed" for n in BUILTIN}  # check boxes: any value is "on"


def accepted(field: str, value: str) -> bool:
    if field.startswith("reward-") and field.endswith("_weight") and value in (ZERO, EMPTY):
        return True  # blank or 0: the reward is left out
    return field in {ZERO: ZERO_OK, NEGATIVE: NEGATIVE_OK, HUGE: HUGE_OK, TEXT: TEXT_OK, EMPTY: EMPTY_OK}[value]


COMBOS = (("grpo", "local"), ("grpo", "verl"), ("distill", "local"), ("distill", "verl"))


def field_groups(project) -> list[tuple[str, str, list[str], dict]]:
    """(kind, backend, fields, extra data): fields fuzzed together in one request. Settings are independent
    (each is checked on its own field), so a combination's settings go at once."""
    from webapp.rewards.forms import RewardSpecForm
    from webapp.runs.forms import INPUT_FIELDS

    groups, seen = [], set()
    for kind, backend in COMBOS:
        fields = [s.form_name for s in SETTINGS if s.offered(kind, backend) and s.form_name not in seen | SKIP]
        seen |= set(fields)
        groups.append((kind, backend, fields, {}))
    rules = [f"rule_{n}_{part}" for n in BUILTIN for part in RULE_PARTS if f"rule_{n}_{part}" not in SKIP]
    groups.append(("grpo", "local", rules, {f"rule_{n}": "on" for n in BUILTIN}))
    groups.append(("grpo", "local", ["he_every"], {}))
    groups.append(("grpo", "local", [f for f in HUMAN_EVAL_FIELDS if f != "he_every"], {"he_every": 2}))
    reward_fields = list(RewardSpecForm(project=project).fields)
    groups.append(("grpo", "local", [f"reward-{n}" for n in reward_fields if n.endswith("_weight")], {}))
    # the version picked for each reward and the shaping of the mix: choices, so garbage is refused on them
    groups.append(("grpo", "local", [f"reward-{n}" for n in reward_fields if not n.endswith("_weight")], {}))
    # A bad input stops the plan, but each input's own check is Django's: they all report at once.
    groups.append(("grpo", "local", [f for f in INPUT_FIELDS if f not in SKIP], {}))
    return groups


@pytest.fixture
def base(project, prompts_version, tiny_model, teacher_model, reward_fn):
    from training.hparams import base_config
    from webapp.runs.forms import settings_initial

    def data(kind: str, backend: str) -> dict:
        out = {k: ("" if v is None else v) for k, v in settings_initial(base_config(kind, "demo-cpu")).items()}
        out = {k: ("on" if v is True else v) for k, v in out.items() if v is not False}
        out.update({"kind": kind, "backend": backend, "preset": "demo-cpu", "dataset_version": prompts_version.pk,
                    "base_model": tiny_model.pk, "include_unreviewed": "on", "max_steps": 10, "he_every": "",
                    f"reward-fn_{reward_fn.pk}_version": reward_fn.latest_version.pk,
                    f"reward-fn_{reward_fn.pk}_weight": 1.0, "reward-shaping": "raw",
                    "guard_rules_form": "1", "human_eval_form": "1"})
        if kind == "distill":
            out.update(teacher_model=teacher_model.pk, distill_mode="on_policy" if backend == "verl" else "offline",
                       distill_loss="k3")
        if backend == "verl":
            out.update(device="cpu", verl_strategy="fsdp2", verl_rollout_engine="hf")
        return out

    return data


@pytest.fixture
def teacher_model(project, tiny_model_dir):
    from webapp.registry.models import ModelEntry, ModelKind

    return ModelEntry.objects.create(project=project, name="teacher", kind=ModelKind.CAUSAL_LM,
                                     path=str(tiny_model_dir))


def test_the_baselines_are_valid(project, engineer, as_user, base, no_enqueue):
    client = as_user(engineer)
    for kind, backend in (("grpo", "local"), ("grpo", "verl"), ("distill", "local"), ("distill", "verl")):
        body = client.post(f"/p/{project.slug}/jobs/preview/", base(kind, backend)).json()
        assert body["ok"], (kind, backend, body["errors"])


def test_every_field_refuses_garbage_on_itself(project, engineer, as_user, base, reward_fn, no_enqueue):
    client = as_user(engineer)
    groups = field_groups(project)
    fuzzed = {f for _k, _b, fields, _x in groups for f in fields}
    assert {"batch_size", "max_response_length", "distill_loss", "verl_nnodes", "rule_kl_threshold", "he_items",
            f"reward-fn_{reward_fn.pk}_weight", "dataset_version"} <= fuzzed
    problems = []
    for kind, backend, fields, extra in groups:
        for value in VALUES:
            data = {**base(kind, backend), **extra, **dict.fromkeys(fields, value)}
            preview = client.post(f"/p/{project.slug}/jobs/preview/", data)
            page = client.post(f"/p/{project.slug}/jobs/new/", {**data, "action": "review"})
            if preview.status_code >= 500 or page.status_code >= 500:
                problems.append(f"{fields}={value!r}: HTTP {preview.status_code} / {page.status_code}")
                continue
            errors = preview.json()["errors"]
            page_errors = {}
            if page.status_code == 400:
                page_errors = {**page.context["form"].errors,
                               **{f"reward-{k}": v for k, v in page.context["reward_form"].errors.items()}}
            for field in fields:
                if accepted(field, value) and (field in errors or field in page_errors):
                    problems.append(f"{field}={value!r} is legitimate but refused: {errors.get(field)}")
                elif not accepted(field, value) and not (field in errors and field in page_errors):
                    problems.append(f"{field}={value!r}: no error on the field (preview: {errors.get(field)}, "
                                    f"page: {page_errors.get(field)})")
    assert not problems, "\n".join(problems)
    assert Job.objects.count() == 0


def test_batch_size_zero_is_an_error_on_its_field_not_a_500(project, engineer, as_user, base, no_enqueue):
    client = as_user(engineer)
    for field in ("batch_size", "micro_batch_size"):
        data = {**base("grpo", "local"), field: "0"}
        body = client.post(f"/p/{project.slug}/jobs/preview/", data).json()
        assert "must be between 1 and" in body["errors"][field][0]
        page = client.post(f"/p/{project.slug}/jobs/new/", {**data, "action": "review"})
        assert page.status_code == 400 and field in page.context["form"].errors


def test_lengths_are_bounded_by_sense_and_by_the_models_context(project, engineer, as_user, base, no_enqueue):
    client = as_user(engineer)
    body = client.post(f"/p/{project.slug}/jobs/preview/",
                       {**base("grpo", "local"), "max_response_length": 10**9, "max_seq_len": 10**9 + 8}).json()
    assert "max_response_length" in body["errors"] and "max_seq_len" in body["errors"]
    # The test model's config.json says max_position_embeddings = 32.
    body = client.post(f"/p/{project.slug}/jobs/preview/",
                       {**base("grpo", "local"), "max_response_length": 40, "max_seq_len": 48}).json()
    assert "model's context (32 tokens" in body["errors"]["max_seq_len"][0]


def test_the_fuzz_covers_every_field_the_form_shows(project, engineer, as_user, base, teacher_model, no_enqueue):
    """A field added to the page later is fuzzed too, or this test names it."""
    import re

    page = as_user(engineer).get(f"/p/{project.slug}/jobs/new/").content.decode()
    shown = set(re.findall(r'<(?:input|select|textarea)\b[^>]*\bname="([^"]+)"', page))
    fuzzed = {f for _k, _b, fields, _x in field_groups(project) for f in fields}
    markers = {"csrfmiddlewaretoken", "action", "guard_rules_form", "human_eval_form", "p"}  # p: the project menu
    assert sorted(shown - fuzzed - SKIP - markers) == []
