"""Automatic judges for a win rate: each pair is judged twice, positions swapped, by a reward model,
a reward (the job's function/model mix, user code only in the sandbox) or a judge model (a causal LM
asked to answer A or B).

`python -m training.judges --pairs PAIRS.jsonl --judge JUDGE.json --out RESULT.json`

PAIRS.jsonl: one pair a line, {"id", "prompt", "a", "b", "ground_truth"?, "data_source"?, "extra_info"?};
`a` is the policy's response, `b` its opponent's (the reference, a previous checkpoint, the base).
JUDGE.json: {"kind": "reward_model", "path": DIR} | {"kind": "reward", "reward": {job.json reward block},
"run_dir": DIR, "sandbox": {...}} | {"kind": "judge_model", "path": DIR, "max_response_length": 16}.

RESULT.json: per pair both orders (first: the policy shown as A; second: shown as B) with the raw
answer or scores, the pair's outcome for the policy (1 / 0.5 / 0; two different verdicts count as a
tie) and a summary: wins, ties, losses, win rate, bootstrap 95 % interval (seeded), the share of
pairs whose verdict flipped with the positions, and the pairs left unjudged. A scalar scorer gives a
response the same score in either position, so its two orders agree by construction (still recorded);
when it gave every response the same score the summary says so (`all_scores_equal`): it told nothing apart.
A judge model whose context cannot hold the judging prompt is refused before loading (`fit_problem`).
Exit code 2: the request is wrong (the message says why).
"""
from __future__ import annotations

import argparse
import functools
import json
import re
import sys
from pathlib import Path
from typing import Any

from training import winrate
from training.rundir import RunDirError, read_jsonl, write_json

KINDS = ("reward_model", "reward", "judge_model")
JUDGE_PROMPT = (
    "You compare two responses to the same prompt. Decide which response is better: more correct, "
    "more helpful, better written. Answer with one letter: A or B.\n\n"
    "[Prompt]\n{prompt}\n\n[Response A]\n{a}\n\n[Response B]\n{b}\n\n"
    "Which response is better, A or B? Answer:"
)


class JudgeError(ValueError):
    """A judging request that cannot run; the message says why."""


# -- parsing a judge model's answer ---------------------------------------------------------------

_BRACKETED = re.compile(r"\[\[\s*(A|B|C|TIE)\s*\]\]", re.I)  # MT-Bench style [[A]]
_STATED = re.compile(r"\b(?:answer|verdict|choice|winner|better(?: response)? is|prefer)\s*(?:is|:|=)?\s*"
                     r"(?:response\s*|option\s*)?[\"'(\[]?\s*(A|B)\b(?![\w'])", re.I)
_RESPONSE_X = re.compile(r"\b(?:response|option|assistant)\s*[\"'(\[]?(A|B)\b[)\]\"']?\s+(?:is|was)\s+"
                         r"(?:better|the better|preferred|best)", re.I)
_LEADING = re.compile(r"^[\s\"'*(\[]*(A|B)(?:[\s\"'*)\].:,!]*$|[)\].:,!]|\s*\n)")
_TIE = re.compile(r"\b(?:tie|equally good|equally bad|both (?:are )?(?:equally|the same)|neither)\b", re.I)


def parse_choice(text: str) -> str | None:
    """"A", "B" or "tie" from a judge model's answer; None when it names no single choice.

    Accepts "A", "B.", "(A)", "[[B]]", "Answer: A", "The better response is B", "Response A is better",
    "tie"; refuses an answer that names both letters with no stated verdict ("A or B?") or none.
    """
    if not isinstance(text, str) or not text.strip():
        return None
    t = text.strip()
    m = _BRACKETED.search(t)
    if m:
        v = m.group(1).upper()
        return v if v in ("A", "B") else "tie"
    found = {m.group(1).upper() for m in _STATED.finditer(t)} | {m.group(1).upper() for m in _RESPONSE_X.finditer(t)}
    if len(found) == 1:
        return found.pop()
    if len(found) > 1:
        return None
    m = _LEADING.match(t)
    if m:
        return m.group(1).upper()
    if _TIE.search(t):
        return "tie"
    return None


def choice_outcome(choice: str | None, policy_position: str) -> float | None:
    """The policy's outcome from a choice of position ("A" / "B" / "tie")."""
    if choice is None:
        return None
    if choice == "tie":
        return winrate.TIE
    return winrate.WIN if choice == policy_position else winrate.LOSS


# -- will a model judge fit these pairs? -----------------------------------------------------------

_CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "n_ctx")
JUDGE_MAX_RESPONSE_LENGTH = 16  # a verdict is one letter; room for "Answer: A"


def context_length(path: Path) -> int | None:
    """The most tokens the model at `path` reads (from its config.json); None when it does not say."""
    try:
        cfg = json.loads((Path(path) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    for key in _CONTEXT_KEYS:
        if isinstance(cfg.get(key), int) and cfg[key] > 0:
            return int(cfg[key])
    return None


@functools.lru_cache(maxsize=16)
def _tokenizer(path: str, mtime: float):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(path)


def token_count(path: Path, text: str) -> int | None:
    """How many tokens the model's own tokenizer (tokenizer.json) makes of `text`; None without one."""
    file = Path(path) / "tokenizer.json"
    try:
        tok = _tokenizer(str(file), file.stat().st_mtime)
    except Exception:  # no tokenizer file, or one the tokenizers library cannot read
        return None
    return len(tok.encode(text, add_special_tokens=False).ids)


def fit_problem(kind: str, path: Path, pairs: list[dict[str, Any]], name: str = "this model") -> str | None:
    """Why a model judge cannot judge these pairs (its context is too short for them), or None when it fits
    or cannot be checked. A judge model must read the whole judging prompt and answer; a reward model reads
    prompt + response (longer inputs are cut from the left, so it would judge only their ends)."""
    ctx = context_length(path)
    if ctx is None or not pairs:
        return None
    longest = max(pairs, key=lambda p: len(p["prompt"]) + len(p["a"]) + len(p["b"]))
    if kind == "judge_model":
        need = token_count(path, JUDGE_PROMPT.format(prompt=longest["prompt"], a=longest["a"], b=longest["b"]))
        if need is not None and need + JUDGE_MAX_RESPONSE_LENGTH > ctx:
            return (f"{name} reads at most {ctx} tokens; judging the longest pair needs {need} tokens of prompt "
                    f"plus {JUDGE_MAX_RESPONSE_LENGTH} to answer.")
        return None
    longest = max(pairs, key=lambda p: len(p["prompt"]) + max(len(p["a"]), len(p["b"])))
    need = token_count(path, longest["prompt"] + max(longest["a"], longest["b"], key=len))
    if need is not None and need > ctx:
        return (f"{name} reads at most {ctx} tokens; the longest prompt and response are {need} tokens, so it "
                f"would score only their last {ctx}.")
    return None


# -- judges --------------------------------------------------------------------------------------

def _check_pairs(pairs: list[dict[str, Any]]) -> None:
    if not pairs:
        raise JudgeError("there are no pairs to judge")
    for i, p in enumerate(pairs):
        for key in ("prompt", "a", "b"):
            if not isinstance(p.get(key), str):
                raise JudgeError(f"pair {i} has no text '{key}'")


def _scalar_judge(pairs: list[dict[str, Any]], reward: dict, run_dir: Path, sandbox: dict | None,
                  device: str, tie_tolerance: float) -> list[dict[str, Any]]:
    from training.reward_client import RewardConfigError, RewardRequest, RewardScorer

    reqs = []
    for p in pairs:
        for side in ("a", "b"):
            reqs.append(RewardRequest(prompt=p["prompt"], response=p[side], ground_truth=p.get("ground_truth"),
                                      data_source=str(p.get("data_source") or "default"),
                                      extra_info=dict(p.get("extra_info") or {})))
    try:
        with RewardScorer(reward, run_dir, sandbox=sandbox, device=device) as scorer:
            results = scorer.score(reqs)
    except RewardConfigError as exc:
        raise JudgeError(str(exc)) from None
    out = []
    for i, p in enumerate(pairs):
        ra, rb = results[2 * i], results[2 * i + 1]
        sa = None if ra.error else ra.score
        sb = None if rb.error else rb.score
        o = winrate.outcome(sa, sb, tie_tolerance)
        error = ra.error or rb.error
        # a scalar score does not depend on the position: the swapped order reads the same two scores
        first = {"policy_position": "A", "scores": {"A": sa, "B": sb}, "outcome": o}
        second = {"policy_position": "B", "scores": {"A": sb, "B": sa}, "outcome": o}
        out.append({"id": p.get("id", i), "first": first, "second": second, "error": error})
    return out


def _chat_model(path: Path) -> bool:
    cfg = path / "tokenizer_config.json"
    try:
        if (path / "chat_template.jinja").exists() or json.loads(cfg.read_text()).get("chat_template"):
            return True
    except (OSError, ValueError):
        pass
    return False


def judge_prompt(prompt: str, first: str, second: str, chat: bool) -> str | list[dict]:
    text = JUDGE_PROMPT.format(prompt=prompt, a=first, b=second)
    return [{"role": "user", "content": text}] if chat else text


def _model_judge(pairs: list[dict[str, Any]], path: Path, device: str, max_response_length: int,
                 seed: int) -> list[dict[str, Any]]:
    from training.generation import GenerationError, load_generator

    if not (path / "config.json").exists():
        raise JudgeError(f"judge model {path} is not an HF model folder (no config.json)")
    chat = _chat_model(path)
    prompts = []
    for p in pairs:
        prompts.append(judge_prompt(p["prompt"], p["a"], p["b"], chat))  # policy shown as A
        prompts.append(judge_prompt(p["prompt"], p["b"], p["a"], chat))  # positions swapped: policy as B
    try:
        with load_generator(path, device=device) as gen:
            answers = gen.generate(prompts, n=1, max_response_length=max_response_length, temperature=0.0, seed=seed)
    except GenerationError as exc:
        raise JudgeError(f"judge model {path}: {exc}") from None
    out = []
    for i, p in enumerate(pairs):
        orders = []
        for j, position in ((2 * i, "A"), (2 * i + 1, "B")):
            text = answers[j][0].text if answers[j] else ""
            choice = parse_choice(text)
            orders.append({"policy_position": position, "answer": text[:500], "choice": choice,
                           "outcome": choice_outcome(choice, position)})
        out.append({"id": p.get("id", i), "first": orders[0], "second": orders[1],
                    "error": None if all(o["choice"] for o in orders) else "an answer named neither A nor B"})
    return out


def _judged_rows(pairs: list[dict[str, Any]], judge: dict[str, Any], device: str, seed: int) -> list[dict[str, Any]]:
    """Each pair judged in both orders by the judge `judge` names (refused with a JudgeError when it cannot)."""
    kind = judge.get("kind")
    if kind not in KINDS:
        raise JudgeError(f"judge kind must be one of {', '.join(KINDS)}, not {kind!r}")
    tie_tolerance = float(judge.get("tie_tolerance", 1e-6))
    if kind == "judge_model":
        if not judge.get("path"):
            raise JudgeError("a judge model needs its folder (path)")
        path = Path(judge["path"])
        problem = fit_problem("judge_model", path, pairs, name=f"judge model {path}")
        if problem:
            raise JudgeError(problem)
        return _model_judge(pairs, path, device, int(judge.get("max_response_length", JUDGE_MAX_RESPONSE_LENGTH)), seed)
    if kind == "reward_model":
        path = Path(str(judge.get("path") or ""))
        if not (path / "config.json").exists():
            raise JudgeError(f"reward model {path} is not an HF model folder (no config.json)")
        return _scalar_judge(pairs, {"shaping": "raw", "components": [{"type": "model", "path": str(path)}]},
                             path, None, device, tie_tolerance)
    if not isinstance(judge.get("reward"), dict) or not judge.get("run_dir"):
        raise JudgeError("a reward judge needs the job's reward block and its run directory")
    return _scalar_judge(pairs, judge["reward"], Path(judge["run_dir"]), judge.get("sandbox"), device, tie_tolerance)


def judge_pairs(pairs: list[dict[str, Any]], judge: dict[str, Any], *, device: str = "cpu", seed: int = 0,
                resamples: int = 1000) -> dict[str, Any]:
    """Judge every pair in both orders; returns the result dict (see the module docstring)."""
    _check_pairs(pairs)
    rows = _judged_rows(pairs, judge, device, seed)
    for r in rows:
        r["outcome"], r["consistent"] = winrate.swap_consistent(r["first"]["outcome"], r["second"]["outcome"])
    scores = {v for r in rows if "scores" in r["first"] for v in r["first"]["scores"].values() if v is not None}
    s = winrate.summarize_swapped(((r["first"]["outcome"], r["second"]["outcome"]) for r in rows),
                                  resamples=resamples, seed=seed)
    summary = {"wins": s.counts.wins, "ties": s.counts.ties, "losses": s.counts.losses, "n": s.judged,
               "win_rate": s.rate, "lo": s.lo, "hi": s.hi, "interval": f"bootstrap {resamples} resamples, seed {seed}",
               "inconsistent": s.inconsistent, "position_bias_share": s.position_bias_share,
               "first_position": s.first_position, "unjudged": s.unjudged, "pairs": len(rows),
               # a scorer that gave every response one score cannot tell the sides apart: say so
               "all_scores_equal": len(scores) == 1 and len(rows) > 1, "the_score": next(iter(scores), None)}
    return {"judge": {k: v for k, v in judge.items() if k != "reward"}, "summary": summary, "pairs": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Judge policy-vs-opponent pairs in both orders.")
    ap.add_argument("--pairs", required=True, help="JSONL: {id, prompt, a (policy), b (opponent), ground_truth?}")
    ap.add_argument("--judge", required=True, help="JSON file naming the judge (see the module docstring)")
    ap.add_argument("--out", required=True, help="where to write the result JSON")
    ap.add_argument("--device", default="cpu", help="cpu | cuda | auto")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--resamples", type=int, default=1000)
    args = ap.parse_args(argv)
    try:
        judge = json.loads(Path(args.judge).read_text())
        pairs = read_jsonl(Path(args.pairs), strict=True)
        if args.device == "auto":
            from training.models import resolve_device

            args.device = str(resolve_device("auto"))
        result = judge_pairs(pairs, judge, device=args.device, seed=args.seed, resamples=args.resamples)
    except (JudgeError, RunDirError, OSError, json.JSONDecodeError) as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    write_json(Path(args.out), result)
    s = result["summary"]
    rate = "n/a" if s["win_rate"] is None else f"{s['win_rate']:.3f} [{s['lo']:.3f}, {s['hi']:.3f}]"
    print(f"W/T/L {s['wins']}/{s['ties']}/{s['losses']}: win rate {rate} on {s['n']} pairs "
          f"({s['inconsistent']} flipped with the positions, {s['unjudged']} unjudged)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
