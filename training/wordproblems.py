"""A GSM8K-format word-problem set, generated offline: templated, seeded, several operations and phrasings.

GSM8K itself cannot be downloaded here, so the real-model task is made the way GSM8K looks: a short
story with one or two arithmetic steps, a worked answer that ends in `#### N` (GSM8K's answer
format) and, in VERL's parquet schema, the prompt as one user turn with VERL's own GSM8K instruction
(`examples/data_preprocess/gsm8k.py`) and `reward_model.ground_truth = "N"`. `data_source` is
`openai/gsm8k`, so VERL's `default_compute_score` picks its gsm8k scorer for these rows.

    python -m training.wordproblems --out DIR [--train 2000] [--val 200] [--seed 0]

writes DIR/train.parquet and DIR/test.parquet (VERL's names) and DIR/all.jsonl (both, with a
`split` column: what the web app imports). The same seed always gives the same problems; no
validation question is also a training question.
"""
from __future__ import annotations

import argparse
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

DATA_SOURCE = "openai/gsm8k"
# VERL's examples/data_preprocess/gsm8k.py appends exactly this to every question.
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'

NAMES = ("Tom", "Mia", "Sam", "Ava", "Leo", "Zoe", "Max", "Lily", "Ben", "Emma", "Noah", "Ella", "Omar", "Nina",
         "Ravi", "Sara", "Kai", "Lucy", "Jack", "Ivy", "Theo", "Rosa", "Hugo", "Anna")
# (singular, plural)
ITEMS = (("apple", "apples"), ("marble", "marbles"), ("sticker", "stickers"), ("book", "books"),
         ("pencil", "pencils"), ("cookie", "cookies"), ("stamp", "stamps"), ("shell", "shells"),
         ("card", "cards"), ("balloon", "balloons"), ("crayon", "crayons"), ("cupcake", "cupcakes"),
         ("toy car", "toy cars"), ("flower", "flowers"), ("coin", "coins"), ("button", "buttons"))
CONTAINERS = (("box", "boxes"), ("bag", "bags"), ("basket", "baskets"), ("jar", "jars"), ("pack", "packs"))
PRICED = (("notebook", "notebooks"), ("sandwich", "sandwiches"), ("ticket", "tickets"), ("pen", "pens"),
          ("juice box", "juice boxes"), ("comic", "comics"))


class _Pick:
    """Draws names, items and numbers for one problem from a seeded generator."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def names(self, k: int = 1) -> list[str]:
        return self.rng.sample(NAMES, k)

    def item(self, table=ITEMS) -> tuple[str, str]:
        return self.rng.choice(table)

    def n(self, low: int, high: int) -> int:
        return self.rng.randint(low, high)

    def phrase(self, options: list[str]) -> str:
        return self.rng.choice(options)


Problem = tuple[str, list[str], int, list[str]]  # question, worked steps, answer, operations


def _add(p: _Pick) -> Problem:
    a, b = p.n(3, 40), p.n(2, 30)
    (who,), (_, many) = p.names(), p.item()
    q = p.phrase([f"{who} has {a} {many}. {who} gets {b} more {many}. How many {many} does {who} have now?",
                  f"There are {a} {many} in a drawer. {who} puts in {b} more. How many {many} are in the drawer?",
                  f"{who} collected {a} {many} on Monday and {b} {many} on Tuesday. How many {many} did {who} "
                  f"collect in all?"])
    return q, [f"{a} + {b} = {a + b}."], a + b, ["+"]


def _sub(p: _Pick) -> Problem:
    b = p.n(2, 25)
    a = b + p.n(1, 40)
    (who, friend), (_, many) = p.names(2), p.item()
    q = p.phrase([f"{who} had {a} {many} and gave {b} of them to {friend}. How many {many} does {who} have left?",
                  f"A shop had {a} {many}. It sold {b} of them. How many {many} are left?",
                  f"{who} has {a} {many}. {friend} has {b} fewer {many} than {who}. How many {many} does "
                  f"{friend} have?"])
    return q, [f"{a} - {b} = {a - b}."], a - b, ["-"]


def _mul(p: _Pick) -> Problem:
    a, b = p.n(2, 12), p.n(2, 12)
    (who,), (_, many), (box, boxes) = p.names(), p.item(), p.item(CONTAINERS)
    q = p.phrase([f"{who} has {a} {boxes}. Each {box} holds {b} {many}. How many {many} does {who} have?",
                  f"There are {a} {boxes} with {b} {many} in each {box}. How many {many} are there in total?",
                  f"{who} buys {a} {boxes} of {many}. Every {box} has {b} {many}. How many {many} did {who} buy?"])
    return q, [f"{a} * {b} = {a * b}."], a * b, ["*"]


def _div(p: _Pick) -> Problem:
    b, c = p.n(2, 10), p.n(2, 12)
    a = b * c
    (who,), (_, many) = p.names(), p.item()
    q = p.phrase([f"{who} shares {a} {many} equally among {b} friends. How many {many} does each friend get?",
                  f"{a} {many} are packed into {b} equal groups. How many {many} are in each group?",
                  f"{who} has {a} {many} and puts them into bags of {b}. How many bags does {who} fill?"])
    answer = c
    return q, [f"{a} / {b} = {answer}."], answer, ["/"]


def _money(p: _Pick) -> Problem:
    price, count = p.n(2, 15), p.n(2, 9)
    (who,), (one, many) = p.names(), p.item(PRICED)
    q = p.phrase([f"A {one} costs ${price}. {who} buys {count} {many}. How many dollars does {who} spend?",
                  f"{who} buys {count} {many} at ${price} each. How much does {who} pay in dollars?"])
    return q, [f"{count} * {price} = {count * price}."], count * price, ["*"]


def _add_sub(p: _Pick) -> Problem:
    a, b = p.n(10, 50), p.n(2, 30)
    c = p.n(1, a + b - 1)
    (who, friend), (_, many) = p.names(2), p.item()
    q = p.phrase([f"{who} has {a} {many}. {who} buys {b} more and then gives {c} to {friend}. How many {many} "
                  f"does {who} have now?",
                  f"A jar holds {a} {many}. {who} adds {b} {many} and {friend} takes out {c}. How many {many} are in "
                  f"the jar now?"])
    return q, [f"{a} + {b} = {a + b}.", f"{a + b} - {c} = {a + b - c}."], a + b - c, ["+", "-"]


def _mul_add(p: _Pick) -> Problem:
    a, b, c = p.n(2, 9), p.n(2, 9), p.n(1, 20)
    (who,), (_, many), (box, boxes) = p.names(), p.item(), p.item(CONTAINERS)
    q = p.phrase([f"{who} has {a} {boxes} of {many} with {b} in each {box}, and {c} loose {many}. How many {many} "
                  f"does {who} have in all?",
                  f"There are {a} {boxes} with {b} {many} each and {c} more {many} on the table. How many {many} are "
                  f"there altogether?"])
    return q, [f"{a} * {b} = {a * b}.", f"{a * b} + {c} = {a * b + c}."], a * b + c, ["*", "+"]


def _mul_sub(p: _Pick) -> Problem:
    price, count = p.n(2, 12), p.n(2, 8)
    total = price * count
    paid = total + p.n(1, 30)
    (who,), (one, many) = p.names(), p.item(PRICED)
    q = p.phrase([f"{who} buys {count} {many} at ${price} each and pays with ${paid}. How much change in dollars "
                  f"does {who} get?",
                  f"Each {one} costs ${price}. {who} has ${paid} and buys {count} {many}. How many dollars does "
                  f"{who} have left?"])
    return q, [f"{count} * {price} = {total}.", f"{paid} - {total} = {paid - total}."], paid - total, ["*", "-"]


def _div_add(p: _Pick) -> Problem:
    b, c, d = p.n(2, 8), p.n(2, 10), p.n(1, 15)
    a = b * c
    (who,), (_, many) = p.names(), p.item()
    q = p.phrase([f"{who} splits {a} {many} equally into {b} piles and then adds {d} {many} to one pile. How many "
                  f"{many} are in that pile?",
                  f"{a} {many} are shared equally by {b} children. One child then finds {d} more. How many {many} "
                  f"does that child have?"])
    return q, [f"{a} / {b} = {c}.", f"{c} + {d} = {c + d}."], c + d, ["/", "+"]


FAMILIES: dict[str, Callable[[_Pick], Problem]] = {
    "add": _add, "sub": _sub, "mul": _mul, "div": _div, "money": _money,
    "add_sub": _add_sub, "mul_add": _mul_add, "mul_sub": _mul_sub, "div_add": _div_add}


def worked_answer(steps: list[str], answer: int) -> str:
    """GSM8K's answer field: the reasoning, then `#### N` on its own line."""
    return " ".join(steps) + f"\n#### {answer}"


def make_row(question: str, steps: list[str], answer: int, ops: list[str], family: str, split: str,
             index: int) -> dict[str, Any]:
    """One prompt row as the web app imports it and `training.parquet` writes it for VERL."""
    return {"prompt": [{"role": "user", "content": f"{question} {INSTRUCTION}"}], "ground_truth": str(answer),
            "data_source": DATA_SOURCE, "ability": "math", "split": split,
            "extra_info": {"split": split, "index": index, "question": question,
                           "answer": worked_answer(steps, answer), "family": family, "operations": "".join(ops),
                           "steps": len(steps)}}


def generate(n_train: int = 2000, n_val: int = 200, seed: int = 0) -> tuple[list[dict], list[dict]]:
    """(train, val) rows: families in turn, each problem drawn from one seeded generator; val questions are
    new questions (none of them also appears in train)."""
    if n_train < 1 or n_val < 0:
        raise ValueError("need at least one training problem and a non-negative validation count")
    rng = random.Random(seed)
    pick = _Pick(rng)
    names = list(FAMILIES)
    seen: set[str] = set()
    out: dict[str, list[dict]] = {"train": [], "val": []}
    tries = 0
    for split, want in (("train", n_train), ("val", n_val)):
        while len(out[split]) < want:
            tries += 1
            if tries > 50 * (n_train + n_val):
                raise ValueError(f"could not draw {want} distinct {split} problems")
            family = names[tries % len(names)]
            question, steps, answer, ops = FAMILIES[family](pick)
            if question in seen:
                continue
            seen.add(question)
            out[split].append(make_row(question, steps, answer, ops, family, split, len(out[split])))
    return out["train"], out["val"]


def write(out_dir: str | Path, n_train: int = 2000, n_val: int = 200, seed: int = 0) -> dict[str, Path]:
    """train.parquet + test.parquet (VERL's schema and names) and all.jsonl (both splits, `split` column)."""
    from training import parquet
    from training.rundir import write_jsonl

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    train, val = generate(n_train, n_val, seed)
    paths = {"train": parquet.write_verl_parquet(train, out / "train.parquet", "train"),
             "all": write_jsonl(out / "all.jsonl", train + val)}
    if val:
        paths["val"] = parquet.write_verl_parquet(val, out / "test.parquet", "test")
    return paths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder for train.parquet, test.parquet and all.jsonl")
    ap.add_argument("--train", type=int, default=2000)
    ap.add_argument("--val", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    paths = write(args.out, args.train, args.val, args.seed)
    print(json.dumps({k: str(v) for k, v in paths.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
