"""Untrusted dataset text is rendered as Markdown but never as live HTML."""
from __future__ import annotations

from webapp.review.render import apply_edit, render_markdown, render_value, response_text


def test_script_and_event_handlers_are_escaped():
    html = render_markdown('Hi <script>alert(1)</script> <img src=x onerror="alert(2)">')
    assert "<script" not in html and "<img" not in html
    assert "&lt;script&gt;" in html  # shown as text, as the model wrote it


def test_javascript_links_lose_their_href():
    html = render_markdown("[click](javascript:alert(1)) and [ok](https://example.org)")
    assert "javascript:" not in html
    assert 'href="https://example.org"' in html


def test_code_fences_and_tables_render():
    html = render_markdown("```python\nprint('<b>')\n```\n\n| a | b |\n|---|---|\n| 1 | 2 |")
    assert '<pre><code class="language-python">' in html and "&lt;b&gt;" in html
    assert "<table>" in html and "<td>1</td>" in html


def test_long_text_falls_back_to_escaped_plain_text():
    html = render_markdown("<b>x</b>" * 5000)
    assert html.startswith('<pre class="plain">') and "<b>" not in html


def test_message_lists_show_roles_escaped():
    html = render_value([{"role": "user<script>", "content": "2+2?"}, {"role": "assistant", "content": "**4**"}])
    assert "user&lt;script&gt;" in html and "<strong>4</strong>" in html


def test_response_text_and_edit_of_message_lists():
    msgs = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    assert response_text(msgs) == "Hello" and response_text("plain") == "plain" and response_text(None) == ""
    assert apply_edit(msgs, "Hey") == [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hey"}]
    assert msgs[-1]["content"] == "Hello"  # the original is not mutated
    assert apply_edit("old", "new") == "new"


def test_raw_html_blocks_are_shown_as_text_and_links_get_rel():
    html = render_markdown('<div onclick="alert(1)">\n<iframe src="https://x.org"></iframe>\n</div>\n\n[a](https://x.org)')
    assert "<div" not in html and "<iframe" not in html and "&lt;iframe" in html
    assert 'rel="noopener noreferrer"' in html


def test_sanitiser_is_nh3_not_the_deprecated_bleach():
    import subprocess
    import sys
    from pathlib import Path

    code = "import sys, webapp.review.render as r; r.render_markdown('*x*'); print('bleach' in sys.modules)"
    root = Path(__file__).resolve().parents[3]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, check=True)
    assert out.stdout.strip() == "False"
    reqs = [line.split("#")[0].strip() for line in (root / "requirements" / "base.txt").read_text().splitlines()]
    assert "bleach" not in reqs and "nh3" in reqs
