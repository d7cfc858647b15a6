"""No emoji in what the app shows: on a machine without an emoji font (Debian's default fonts are DejaVu and
Liberation) an emoji is an empty box. Icons are inline SVG; arrows and bullets are characters DejaVu has."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
# Emoji and pictographs, dingbats and miscellaneous symbols, and the variation selector that asks for emoji.
EMOJI = re.compile("[\U0001F000-\U0001FAFF\u2600-\u27BF\u2B50-\u2B55\uFE0F\u200D]")
SHOWN = [("templates", "*.html"), ("webapp/static/js", "*.js"), ("webapp/static/css", "*.css"), ("webapp", "*.py")]


def emoji_in(text: str) -> list[str]:
    return EMOJI.findall(text)


def test_the_pattern_finds_emoji():
    assert emoji_in("🔒 kept ✅ ⚠️") == ["🔒", "✅", "⚠", "\ufe0f"]
    assert emoji_in("← Jobs · step 10 → step 20 ● ↔ ↳") == []  # arrows and bullets DejaVu Sans has


def test_templates_scripts_and_messages_carry_no_emoji():
    found = []
    for folder, pattern in SHOWN:
        for path in sorted((ROOT / folder).rglob(pattern)):
            if "vendor" in path.parts:
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if emoji_in(line):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {''.join(emoji_in(line))}")
    assert found == [], "emoji render as empty boxes without an emoji font:\n" + "\n".join(found)
