"""The one generation interface (training.generation) on the tiny demo models: seeds, n, truncation, folders."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from training import demo
from training.generation import Generation, GenerationError, choose_engine, load_generator
from training.generation_hf import TransformersGenerator
from training.models import load_model_and_tokenizer

PROMPTS = ["1+2=", "3+3=", "0+5=", "4+1="]


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("gen-models")
    return {"policy": demo.build_demo_model(root / "demo-tiny", warmup_steps=60),
            "teacher": demo.build_demo_teacher(root / "teacher", steps=150)}


@pytest.fixture(scope="module")
def gen(models):
    with load_generator(models["policy"], engine="auto", device="cpu") as g:
        yield g


def texts(rows: list[list[Generation]]) -> list[list[str]]:
    return [[g.text for g in row] for row in rows]


def test_auto_picks_transformers_without_cuda_and_vllm_is_refused_here(gen):
    assert gen.engine == "transformers"
    assert choose_engine("auto", "cpu") == "transformers"
    if not torch.cuda.is_available():
        with pytest.raises(GenerationError, match="vllm"):
            choose_engine("vllm")
    with pytest.raises(GenerationError, match="engine must be"):
        choose_engine("tgi")


def test_a_seed_makes_sampling_repeatable_and_another_seed_differs(gen):
    a = gen.generate(PROMPTS * 4, n=3, max_response_length=4, temperature=1.5, seed=11)
    b = gen.generate(PROMPTS * 4, n=3, max_response_length=4, temperature=1.5, seed=11)
    c = gen.generate(PROMPTS * 4, n=3, max_response_length=4, temperature=1.5, seed=12)
    assert texts(a) == texts(b)
    assert [[g.token_ids for g in r] for r in a] == [[g.token_ids for g in r] for r in b]
    assert texts(a) != texts(c)


def test_n_samples_per_prompt_and_they_vary(gen):
    out = gen.generate(PROMPTS, n=8, max_response_length=4, temperature=2.0, seed=3)
    assert len(out) == len(PROMPTS) and all(len(row) == 8 for row in out)
    assert any(len(set(row)) > 1 for row in texts(out))  # sampling, not 8 copies


def test_prompt_i_is_seeded_with_seed_plus_i_whatever_its_batch(models):
    with load_generator(models["policy"], device="cpu", batch_size=3) as g:
        batch = g.generate(PROMPTS, n=2, max_response_length=4, temperature=1.5, seed=40)
        alone = [g.generate([p], n=2, max_response_length=4, temperature=1.5, seed=40 + i)[0]
                 for i, p in enumerate(PROMPTS)]
    assert texts(batch) == texts(alone)


def test_greedy_ignores_the_seed_and_matches_a_taught_model(models):
    with load_generator(models["teacher"], device="cpu") as g:
        one = g.generate(PROMPTS, max_response_length=4, temperature=0, seed=1)
        two = g.generate(PROMPTS, max_response_length=4, temperature=0, seed=2)
    assert texts(one) == texts(two)
    right = sum(row[0].text.strip() == str(eval(p[:-1])) for p, row in zip(PROMPTS, one, strict=True))
    assert right >= 3  # the teacher learnt the sums
    assert all(row[0].finish_reason == "stop" and not row[0].truncated for row in one)


def test_truncated_when_max_response_length_is_hit(gen):
    out = gen.generate(PROMPTS, n=2, max_response_length=1, temperature=1.0, seed=0)
    flat = [g for row in out for g in row]
    # one token is a digit: never the end of the answer (demo answers end with EOS after the number)
    assert all(g.truncated and g.finish_reason == "length" and len(g.token_ids) == 1 for g in flat)
    longer = [g for row in gen.generate(PROMPTS, n=2, max_response_length=6, temperature=0, seed=0) for g in row]
    assert all(not g.truncated and g.finish_reason == "stop" for g in longer)
    assert all(len(g.token_ids) < 6 for g in longer)


def test_the_model_s_positions_cap_the_budget(gen):
    # the demo model reads 32 positions: asking for 500 new tokens stops there, marked truncated if no EOS
    out = gen.generate(["1+1="], max_response_length=500, temperature=3.0, seed=5)
    assert len(out[0][0].token_ids) <= 28


def test_message_lists_render_with_plain_roles_when_the_tokenizer_has_no_template(models):
    model, tok = load_model_and_tokenizer(models["policy"])
    g = TransformersGenerator(model, tok)
    msgs = [{"role": "user", "content": "1+2="}]
    out = g.generate([msgs], max_response_length=3, temperature=0)
    assert len(out) == 1 and isinstance(out[0][0].text, str)


def test_checkpoint_folders_load_with_the_base_model_s_tokenizer(tmp_path, models):
    ckpt = tmp_path / "checkpoints" / "global_step_10"
    shutil.copytree(models["teacher"], ckpt / "model")
    for f in (ckpt / "model").glob("tokenizer*"):
        f.unlink()
    (ckpt / "manifest.json").write_text(json.dumps({"step": 10, "format": "local", "lora": False}))
    with pytest.raises(GenerationError, match="no tokenizer"):
        load_generator(ckpt, device="cpu")
    with load_generator(ckpt, device="cpu", base_model=models["policy"]) as g:
        out = g.generate(["2+2="], max_response_length=4, temperature=0)
        workdir = g.workdir
    assert out[0][0].text.strip() == "4"
    assert workdir is not None and not workdir.exists()  # close() cleans up


def test_bad_requests_are_refused_with_a_reason(gen, tmp_path):
    with pytest.raises(GenerationError, match="n must be"):
        gen.generate(PROMPTS, n=0)
    with pytest.raises(GenerationError, match="top_p"):
        gen.generate(PROMPTS, top_p=0)
    with pytest.raises(GenerationError, match="temperature"):
        gen.generate(PROMPTS, temperature=-1)
    with pytest.raises(GenerationError, match="does not exist"):
        load_generator(tmp_path / "nope", device="cpu")
    (tmp_path / "empty").mkdir()
    with pytest.raises(GenerationError, match="not an HF model folder"):
        load_generator(tmp_path / "empty", device="cpu")


def test_the_vllm_engine_asks_for_n_samples_with_a_seed_per_prompt(monkeypatch, models):
    """vLLM is not installed here: a stand-in module records what the engine asks of vLLM's API."""
    import sys
    import types

    calls = {}

    class SamplingParams:
        def __init__(self, **kw):
            self.kw = kw

    class LLM:
        def __init__(self, **kw):
            calls["llm"] = kw

        def get_tokenizer(self):
            return types.SimpleNamespace(eos_token_id=2, chat_template=None)

        def generate(self, prompts, params, lora_request=None, use_tqdm=True):
            calls["generate"] = (prompts, [p.kw for p in params], lora_request)
            out = types.SimpleNamespace
            return [out(outputs=[out(text=f"{p}!{k}", token_ids=[5, 6, 2] if k == 0 else [5, 6, 7],
                                     finish_reason="stop" if k == 0 else "length") for k in range(p_.kw["n"])])
                    for p, p_ in zip(prompts, params, strict=True)]

    fake = types.ModuleType("vllm")
    fake.LLM, fake.SamplingParams = LLM, SamplingParams
    monkeypatch.setitem(sys.modules, "vllm", fake)
    monkeypatch.setattr("training.generation.vllm_available", lambda: True)
    gen = load_generator(models["policy"], engine="auto", device="cuda", dtype="bfloat16")
    assert gen.engine == "vllm" and calls["llm"]["model"] == str(models["policy"])
    assert calls["llm"]["dtype"] == "bfloat16"
    out = gen.generate(["1+2=", [{"role": "user", "content": "3+3="}]], n=2, max_response_length=7, temperature=0.5,
                       top_p=0.9, seed=100)
    prompts, params, lora = calls["generate"]
    assert prompts == ["1+2=", "user: 3+3=\nassistant: "] and lora is None
    assert [p["seed"] for p in params] == [100, 101]
    assert params[0] == {"n": 2, "temperature": 0.5, "top_p": 0.9, "max_tokens": 7, "seed": 100}
    assert out[0][0] == Generation("1+2=!0", [5, 6], "stop", False)  # the end-of-sequence id is dropped
    assert out[0][1].truncated and out[0][1].finish_reason == "length" and out[0][1].token_ids == [5, 6, 7]
    gen.close()
    assert gen.llm is None
