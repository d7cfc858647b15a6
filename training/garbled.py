"""Garbled rollouts: the per-step share of responses that repeat themselves, carry broken encoding or switch script.

Numeric-precision trouble (a bf16 rollout engine drifting from the trainer, a bad kernel) shows up in the text
before it shows up in the loss: responses loop on one phrase, carry U+FFFD replacement characters or bytes
that are not UTF-8, or drift into another writing system than the prompt's. Both backends compute these
from the same rows of the rollout store (`samples/rollout/<step>.jsonl`, {"input", "output", ...}): the local
trainer when it writes a step, the web app from VERL's dump at ingest (`training.ingest.rollout_metrics`).
The built-in health rule "garbled_output" watches `GARBLED_SHARE`.

Pure functions, standard library only.
"""
from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

REPETITION_SHARE = "garbled/repetition_share"
ENCODING_SHARE = "garbled/encoding_share"
SCRIPT_SWITCH_SHARE = "garbled/script_switch_share"
GARBLED_SHARE = "garbled/share"  # a response with any of the three
METRICS = (REPETITION_SHARE, ENCODING_SHARE, SCRIPT_SWITCH_SHARE, GARBLED_SHARE)

NGRAM = 8  # a "long" n-gram: this many tokens ...
REPEATS = 3  # ... seen at least this many times in one response
SWITCH_SHARE = 0.3  # letters outside the prompt's script above this share of the response's letters ...
SWITCH_MIN_LETTERS = 8  # ... and at least this many of them

# Scripts written without spaces: each character is a token for the n-gram count.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_TOKEN = re.compile(rf"[{_CJK}]|[^\W{_CJK}]+|[^\w\s]")
_BROKEN = re.compile("[\ufffd\ud800-\udfff]")  # replacement character, or a lone surrogate (undecodable byte)
# Unicode name prefixes -> script family; Han and kana are one family (Japanese mixes them).
_FAMILIES = (("LATIN", "latin"), ("CYRILLIC", "cyrillic"), ("GREEK", "greek"), ("ARABIC", "arabic"),
             ("HEBREW", "hebrew"), ("DEVANAGARI", "devanagari"), ("THAI", "thai"), ("HANGUL", "hangul"),
             ("CJK", "cjk"), ("HIRAGANA", "cjk"), ("KATAKANA", "cjk"), ("ARMENIAN", "armenian"),
             ("GEORGIAN", "georgian"), ("BENGALI", "bengali"), ("TAMIL", "tamil"))


_HAS_CJK = re.compile(f"[{_CJK}]")


def tokens(text: str) -> list[str]:
    """Words, punctuation marks, and single characters of scripts written without spaces (text without such
    characters is split on whitespace: the same n-grams up to punctuation, many times faster)."""
    if text.isascii():  # known without a scan (CPython flags ASCII strings)
        return text.split()
    return _TOKEN.findall(text) if _HAS_CJK.search(text) else text.split()


def max_ngram_repeats(text: str, n: int = NGRAM) -> int:
    """How often the most frequent n-token sequence occurs in `text` (0 when it has fewer than n tokens)."""
    toks = tokens(text)
    if len(toks) < n:
        return 0
    counts = Counter(zip(*(toks[i:] for i in range(n)), strict=False))  # the n-grams, built in C
    return max(counts.values())


def is_repetitive(text: str, n: int = NGRAM, repeats: int = REPEATS) -> bool:
    """max_ngram_repeats(text, n) >= repeats, counting long n-grams only where they can reach `repeats`: an n-gram
    seen that often starts with a half-length n-gram seen at least as often (smaller tuples, counted first)."""
    toks = tokens(text)
    if len(toks) < n:
        return False
    half = max(1, n // 2)
    heads = list(zip(*(toks[i:] for i in range(half)), strict=False))
    counts = Counter(heads)
    if max(counts.values()) < repeats:
        return False
    starts = [i for i in range(len(toks) - n + 1) if counts[heads[i]] >= repeats]
    if len(starts) < repeats:
        return False
    return max(Counter(tuple(toks[i:i + n]) for i in starts).values()) >= repeats


def has_broken_encoding(text: str | bytes) -> bool:
    """Replacement characters or invalid UTF-8 (raw bytes that do not decode, or lone surrogates left by a
    lenient decoder)."""
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError:
            return True
    return _BROKEN.search(text) is not None


@lru_cache(maxsize=65536)
def script_of(char: str) -> str | None:
    """The script family of a letter (None for digits, punctuation, symbols and unnamed characters)."""
    if not char.isalpha():
        return None
    name = unicodedata.name(char, "")
    for prefix, family in _FAMILIES:
        if name.startswith(prefix):
            return family
    return "other" if name else None


_ASCII_LETTERS = bytes(range(65, 91)) + bytes(range(97, 123))


def script_counts(text: str) -> Counter[str]:
    """Letters per script family (each distinct character looked up once; ASCII text counted in C)."""
    out: Counter[str] = Counter()
    if text.isascii():  # the usual response: its letters are A-Z and a-z, all Latin
        raw = text.encode("ascii")
        letters = len(raw) - len(raw.translate(None, _ASCII_LETTERS))
        if letters:
            out["latin"] = letters
        return out
    for char, count in Counter(text).items():
        family = script_of(char)
        if family is not None:
            out[family] += count
    return out


# Chat-template markup is not the user's language: <|im_start|>, <s>, [INST], and the role words after them.
_ROLES = "(?:system|user|assistant)"
_MARKUP = re.compile(rf"<\|[^|>]{{0,40}}\|>{_ROLES}?|</?s>|\[/?INST\]|^{_ROLES}\s*$", re.M)


@lru_cache(maxsize=4096)  # a group's samples share their prompt
def dominant_script(text: str) -> str | None:
    """The script most of the text's letters are written in, chat-template markup left out."""
    counts = script_counts(_MARKUP.sub(" ", text))
    return counts.most_common(1)[0][0] if counts else None


def switches_script(prompt: str, response: str, share: float = SWITCH_SHARE,
                    min_letters: int = SWITCH_MIN_LETTERS) -> bool:
    """True when more than `share` of the response's letters (and at least `min_letters`) are in another script
    than the prompt's main one. A prompt without letters (numbers only) judges nothing."""
    home = dominant_script(prompt)
    if home is None:
        return False
    counts = script_counts(response)
    foreign = sum(counts.values()) - counts.get(home, 0)
    return foreign >= min_letters and foreign > share * sum(counts.values())


def _text(value: Any) -> str | bytes:
    if isinstance(value, (str, bytes, bytearray)):
        return value
    return "" if value is None else str(value)


def garbled_metrics(rows: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """The step's shares of garbled responses over rollout-store rows ({"input": prompt, "output": response});
    {} without rows."""
    n = repetitive = broken = switched = any_ = 0
    for row in rows:
        prompt, response = _text(row.get("input")), _text(row.get("output"))
        bad_encoding = has_broken_encoding(response)
        if isinstance(response, (bytes, bytearray)):
            response = bytes(response).decode("utf-8", errors="replace")
        if isinstance(prompt, (bytes, bytearray)):
            prompt = bytes(prompt).decode("utf-8", errors="replace")
        rep, sw = is_repetitive(response), switches_script(prompt, response)
        n += 1
        repetitive += rep
        broken += bad_encoding
        switched += sw
        any_ += rep or bad_encoding or sw
    if not n:
        return {}
    return {REPETITION_SHARE: repetitive / n, ENCODING_SHARE: broken / n, SCRIPT_SWITCH_SHARE: switched / n,
            GARBLED_SHARE: any_ / n}
