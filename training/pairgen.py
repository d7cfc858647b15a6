"""Responses of a policy and its opponent (an earlier checkpoint or the base model) on the same prompts,
with the same sampling settings, for a blind pairwise evaluation.

`python -m training.pairgen --prompts P.jsonl --policy CKPT --opponent CKPT_OR_MODEL --base-model DIR --out PAIRS.jsonl`

P.jsonl rows: {"prompt": text or chat messages, "ground_truth"?, "data_source"?, "extra_info"?}. PAIRS.jsonl rows:
{"id", "prompt" (text), "a" (the policy's response), "b" (the opponent's), "ground_truth", "data_source",
"extra_info", "seed", "truncated": {"a", "b"}} — the pair format `training.judges` reads (a reward judging the
pair gets the prompt row's ground truth, data source and extra info, as in training). One model is loaded at a time.
Generation goes through `training.generation` (vLLM on a GPU worker that has it, else transformers).
Exit code 2: the request is wrong (the message says why).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from training.rundir import RunDirError, read_jsonl, write_atomic


class PairGenError(ValueError):
    """A request that cannot run; the message says why."""


def prompt_text(prompt: Any) -> str:
    if isinstance(prompt, list):
        return "\n".join(f"{m.get('role', '')}: {m.get('content', '')}" if isinstance(m, dict) else str(m)
                         for m in prompt)
    return "" if prompt is None else str(prompt)


def _responses(model: Path, base_model: Path | None, prompts: list, *, max_new_tokens: int, temperature: float,
               seed: int, device: str) -> list[tuple[str, bool]]:
    from training.generation import GenerationError, load_generator

    try:
        with load_generator(model, base_model=base_model, device=device) as gen:
            out = gen.generate(prompts, n=1, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed)
    except GenerationError as exc:
        raise PairGenError(f"{model}: {exc}") from None
    return [(g[0].text, bool(g[0].truncated)) if g else ("", False) for g in out]


def generate_pairs(rows: list[dict], policy: Path, opponent: Path, *, base_model: Path | None = None,
                   max_new_tokens: int = 64, temperature: float = 0.0, seed: int = 0,
                   device: str = "auto") -> list[dict[str, Any]]:
    if not rows:
        raise PairGenError("there are no prompts")
    for path, what in ((policy, "policy"), (opponent, "opponent")):
        if not str(path) or str(path) == "." or not Path(path).exists():
            raise PairGenError(f"the {what} {path} does not exist")
    prompts = [r.get("prompt") for r in rows]
    if any(not isinstance(p, (str, list)) or not p for p in prompts):
        raise PairGenError("every prompt must be text or a list of chat messages")
    kw = {"max_new_tokens": max_new_tokens, "temperature": temperature, "seed": seed, "device": device}
    a = _responses(Path(policy), base_model, prompts, **kw)
    b = _responses(Path(opponent), base_model, prompts, **kw)
    return [{"id": i, "prompt": prompt_text(r.get("prompt")), "a": ra[0], "b": rb[0],
             "ground_truth": r.get("ground_truth"), "data_source": str(r.get("data_source") or ""),
             "extra_info": r.get("extra_info") if isinstance(r.get("extra_info"), dict) else {}, "seed": seed + i,
             "truncated": {"a": ra[1], "b": rb[1]}}
            for i, (r, ra, rb) in enumerate(zip(rows, a, b, strict=True))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Policy and opponent responses on the same prompts.")
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--policy", required=True, help="a checkpoint folder or an HF model folder")
    ap.add_argument("--opponent", required=True, help="an earlier checkpoint folder or the base model folder")
    ap.add_argument("--base-model", default=None, help="the run's base model (tokenizer, LoRA base)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="auto")
    args = ap.parse_args(argv)
    try:
        rows = read_jsonl(args.prompts, strict=True)
        pairs = generate_pairs(rows, Path(args.policy), Path(args.opponent),
                               base_model=Path(args.base_model) if args.base_model else None,
                               max_new_tokens=args.max_new_tokens, temperature=args.temperature, seed=args.seed,
                               device=args.device)
    except (PairGenError, RunDirError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    write_atomic(Path(args.out), "".join(json.dumps(p) + "\n" for p in pairs))
    print(f"{len(pairs)} pairs written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
