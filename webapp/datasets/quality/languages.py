"""Language of a text with py3langid (langid.py's model, shipped inside the wheel: nothing is downloaded)."""
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
    UNKNOWN: "Undetermined",
}


def detector_name() -> str:
    return f"py3langid {version('py3langid')}"


def rule() -> str:
    return (f"Each prompt's first {MAX_CHARS} characters go to {detector_name()} (langid.py's naive Bayes model over "
            f"byte n-grams, 97 languages, shipped with the library). A prompt with no letters, or whose most likely "
            f"language has a probability under {MIN_CONFIDENCE:.0%}, counts as undetermined ({UNKNOWN}).")


@lru_cache(maxsize=1)
def _identifier():
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def detect(text: str) -> str:
    """An ISO 639-1 code, or 'und' when the text is too short or too ambiguous to tell."""
    text = text[:MAX_CHARS]
    if not any(ch.isalpha() for ch in text):
        return UNKNOWN
    code, probability = _identifier().classify(text)
    return code if probability >= MIN_CONFIDENCE else UNKNOWN


def name(code: str) -> str:
    return NAMES.get(code, code)
