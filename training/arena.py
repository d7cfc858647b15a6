"""Generate both sides of an arena: the same prompts, sampling settings and seeds for two models.

`python -m training.arena --spec SPEC.json --out PAIRS.jsonl`

SPEC: {"sides": {"a": {"path", "base_model"}, "b": {...}}, "prompts": [str | messages], "seed": S,
       "sampling": {"max_response_length", "temperature", "top_p"}, "engine": "auto", "device": "auto"}
Prompt i is sampled with seed S + i on both sides (training.generation's per-prompt rule), so a pair can be
generated again on its own. Progress goes to stdout as JSON lines ({"progress": 0.5}); PAIRS gets one line
per prompt: {"index", "seed", "a": Generation, "b": Generation} and the last stdout line names the engine.
Exit code 2: the request is wrong (the message says how).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from training.generation import GenerationError, load_generator
from training.rundir import write_jsonl

SAMPLING_DEFAULTS = {"max_response_length": 64, "temperature": 0.7, "top_p": 1.0}
CHUNK = 16


def sampling_of(raw: dict[str, Any] | None) -> dict[str, Any]:
    s = {**SAMPLING_DEFAULTS, **{k: v for k, v in (raw or {}).items() if k in SAMPLING_DEFAULTS and v is not None}}
    return {"max_response_length": int(s["max_response_length"]), "temperature": float(s["temperature"]),
            "top_p": float(s["top_p"])}


def generate_side(side: dict[str, Any], prompts: list, sampling: dict[str, Any], seed: int, *, engine: str,
                  device: str, report=None) -> tuple[str, list[dict[str, Any]]]:
    """(engine used, one generation dict per prompt) for one side, in chunks so progress can be reported."""
    if not side.get("path"):
        raise GenerationError("a side has no model path")
    out: list[dict[str, Any]] = []
    with load_generator(side["path"], engine=engine, device=device, base_model=side.get("base_model")) as gen:
        for start in range(0, len(prompts), CHUNK):
            rows = gen.generate(prompts[start:start + CHUNK], n=1, seed=seed + start, **sampling)
            out.extend(r[0].to_dict() for r in rows)
            if report:
                report(len(out))
        return gen.engine, out


def run(spec: dict[str, Any], out: Path) -> str:
    prompts = spec.get("prompts") or []
    if not prompts:
        raise GenerationError("the arena has no prompts")
    sampling, seed = sampling_of(spec.get("sampling")), int(spec.get("seed") or 0)
    total = 2 * len(prompts)
    results, engine = {}, ""
    for k, name in enumerate(("a", "b")):
        def report(done: int, k: int = k) -> None:
            print(json.dumps({"progress": round((k * len(prompts) + done) / total, 4)}), flush=True)

        engine, results[name] = generate_side(spec["sides"][name], prompts, sampling, seed,
                                              engine=spec.get("engine", "auto"), device=spec.get("device", "auto"),
                                              report=report)
    write_jsonl(out, [{"index": i, "seed": seed + i, "a": results["a"][i], "b": results["b"][i]}
                      for i in range(len(prompts))])
    print(json.dumps({"engine": engine}), flush=True)
    return engine


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Generate both sides of an arena.")
    ap.add_argument("--spec", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    try:
        spec = json.loads(Path(args.spec).read_text())
        run(spec, Path(args.out))
    except (GenerationError, OSError, ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
