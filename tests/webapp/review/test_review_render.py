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
