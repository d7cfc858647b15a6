"""Tiny offline models and a loader shared by every local trainer.

Nothing here touches a model hub: tiny models are built from a character vocabulary and
random weights, then saved as ordinary safetensors HF folders that any loader accepts.
"""
from __future__ import annotations

import json
import string
from pathlib import Path
from typing import Any

import torch

SPECIAL_TOKENS = ["<pad>", "<s>", "</s>", "<unk>"]
# Printable ASCII minus the control-ish whitespace: enough for prompts written by hand.
DEFAULT_VOCAB = "".join(c for c in string.printable if c not in "\t\n\r\x0b\x0c")
# Tokenizer classes that must be loaded as plain PreTrainedTokenizerFast: AutoTokenizer maps
# them to the model type's own tokenizer (Qwen2Tokenizer), which rebuilds the pipeline and
# drops spaces (environment notes, gotcha 2).
_PLAIN_FAST_CLASSES = {"TokenizersBackend", "PreTrainedTokenizerFast"}


def build_char_tokenizer(vocab: str = DEFAULT_VOCAB):
    """Return a left-padding character-level PreTrainedTokenizerFast over `vocab`."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = list(dict.fromkeys(vocab))  # keep order, drop duplicates
    table = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + chars)}
    core = Tokenizer(models.WordLevel(vocab=table, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", bos_token="<s>", eos_token="</s>",
        unk_token="<unk>", padding_side="left",
    )


def _tiny_config(tok, hidden: int, layers: int, max_positions: int):
    from transformers import Qwen2Config

    heads = max(1, hidden // 16)
    return Qwen2Config(
        vocab_size=len(tok), hidden_size=hidden, intermediate_size=hidden * 2,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=max(1, heads // 2),
        max_position_embeddings=max_positions, tie_word_embeddings=True,
        pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
    )


def build_tiny_model(
    out_dir: str | Path, vocab: str = DEFAULT_VOCAB, hidden: int = 64, layers: int = 2,
    seed: int = 0, max_positions: int = 256,
) -> Path:
    """Build a random tiny Qwen2ForCausalLM + char tokenizer and save it as an HF folder."""
    from transformers import Qwen2ForCausalLM

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = build_char_tokenizer(vocab)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(_tiny_config(tok, hidden, layers, max_positions))
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def build_tiny_reward_model(
    out_dir: str | Path, vocab: str = DEFAULT_VOCAB, hidden: int = 64, layers: int = 2,
    seed: int = 0, max_positions: int = 256,
) -> Path:
    """Build a random tiny Qwen2ForSequenceClassification (one logit) + tokenizer."""
    from transformers import Qwen2ForSequenceClassification

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = build_char_tokenizer(vocab)
    cfg = _tiny_config(tok, hidden, layers, max_positions)
    cfg.num_labels = 1
    torch.manual_seed(seed)
    Qwen2ForSequenceClassification(cfg).save_pretrained(out)
    tok.save_pretrained(out)
    return out


def load_tokenizer(path: str | Path):
    """Load a tokenizer, keeping char tokenizers as PreTrainedTokenizerFast (see module notes)."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    path = Path(path)
    cfg_file = path / "tokenizer_config.json"
    cls_name = ""
    if cfg_file.exists():
        cls_name = json.loads(cfg_file.read_text()).get("tokenizer_class", "")
    if cls_name in _PLAIN_FAST_CLASSES and (path / "tokenizer.json").exists():
        tok = PreTrainedTokenizerFast.from_pretrained(path)
    else:
        tok = AutoTokenizer.from_pretrained(path)
    if tok.pad_token is None:  # many causal LMs ship without one
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return tok


def resolve_device(device: str = "auto") -> torch.device:
    """Map "auto" | "cpu" | "cuda" (or "cuda:N") to a torch device; refuse cuda when absent."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError("hp.device is 'cuda' but no CUDA device is visible to this process")
    if device != "cpu" and not device.startswith("cuda"):
        raise ValueError(f"hp.device must be auto, cpu or cuda, not {device!r}")
    return torch.device(device)


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """Map "auto" to bf16 on CUDA devices that support it and fp32 everywhere else."""
    if dtype == "auto":
        if device.type == "cuda" and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    table = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if dtype not in table:
        raise ValueError(f"hp.dtype must be auto, float32 or bfloat16, not {dtype!r}")
    return table[dtype]


def lora_config(lora: dict[str, Any], task_type: str = "CAUSAL_LM"):
    """Build a peft LoraConfig from the job's `hp.lora` block."""
    from peft import LoraConfig

    targets = lora.get("targets", "all-linear")
    if isinstance(targets, str) and targets != "all-linear":
        targets = [t.strip() for t in targets.split(",") if t.strip()]
    return LoraConfig(
        r=int(lora["rank"]), lora_alpha=float(lora.get("alpha", 16)), target_modules=targets,
        lora_dropout=float(lora.get("dropout", 0.0)), task_type=task_type,
    )


def load_model_and_tokenizer(
    path: str | Path, device: str | torch.device = "cpu", dtype: str | torch.dtype = "float32",
    lora: dict[str, Any] | None = None, adapter_path: str | Path | None = None,
    kind: str = "causal_lm",
):
    """Load an HF folder as (model, tokenizer) on `device`.

    `lora` with rank > 0 wraps the model in fresh trainable peft adapters; `adapter_path`
    instead loads saved adapters (a LoRA checkpoint) on top of the base at `path`.
    `kind` is "causal_lm" or "seq_cls" (a one-logit reward head).
    """
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    path = Path(path)
    if not (path / "config.json").exists():
        raise FileNotFoundError(f"no HF model folder at {path} (config.json missing)")
    dev = device if isinstance(device, torch.device) else resolve_device(device)
    dt = dtype if isinstance(dtype, torch.dtype) else resolve_dtype(dtype, dev)
    tok = load_tokenizer(path)
    if kind == "seq_cls":
        model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1, dtype=dt)
        task_type = "SEQ_CLS"
    else:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dt)
        task_type = "CAUSAL_LM"
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tok.pad_token_id
    if adapter_path is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter_path), is_trainable=True)
    elif lora and int(lora.get("rank", 0)) > 0:
        from peft import get_peft_model

        model = get_peft_model(model, lora_config(lora, task_type))
    return model.to(dev), tok
