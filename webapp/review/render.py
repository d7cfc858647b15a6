"""Safe display of prompts and responses: Markdown to HTML, then sanitised with nh3.

Dataset text is untrusted. Raw HTML inside it is escaped (shown as text: Markdown's raw-HTML
handlers are removed), the output is cleaned against an allow-list, links keep only safe protocols,
and very long texts are shown as escaped plain text so rendering stays fast.
"""
from __future__ import annotations

import html
from typing import Any

import markdown
import nh3

ALLOWED_TAGS = {
    "p", "br", "hr", "pre", "code", "blockquote", "em", "strong", "del", "a", "ul", "ol", "li",
    "h1", "h2", "h3", "h4", "h5", "h6", "table", "thead", "tbody", "tr", "th", "td", "span", "div",
}
ALLOWED_ATTRIBUTES = {"a": {"href", "title"}, "code": {"class"}, "th": {"align"}, "td": {"align"}}
ALLOWED_PROTOCOLS = {"http", "https", "mailto"}
MARKDOWN_MAX_CHARS = 20_000  # beyond this, plain escaped text: Markdown on 100k chars takes too long


def render_markdown(text: str) -> str:
    """Return sanitised HTML for a Markdown text (code fences and tables supported)."""
    if len(text) > MARKDOWN_MAX_CHARS:
        return f'<pre class="plain">{html.escape(text)}</pre>'
    md = markdown.Markdown(extensions=["fenced_code", "tables", "sane_lists"], output_format="html")
    # raw HTML is shown as text, as the model wrote it, instead of being parsed
    md.preprocessors.deregister("html_block")
    md.inlinePatterns.deregister("html")
    return nh3.clean(md.convert(text), tags=ALLOWED_TAGS, attributes=ALLOWED_ATTRIBUTES, url_schemes=ALLOWED_PROTOCOLS,
                     strip_comments=True, link_rel="noopener noreferrer")


def is_messages(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(m, dict) for m in value)


def message_content(message: dict) -> str:
    content = message.get("content", "")
    if isinstance(content, list):  # multi-part content: keep the text parts
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def render_value(value: Any) -> str:
    """HTML for a prompt or response stored as a string or a list of {"role", "content"} messages."""
    if value is None:
        return '<p class="empty">(none)</p>'
    if is_messages(value):
        parts = []
        for m in value:
            role = html.escape(str(m.get("role", "")))
            parts.append(f'<div class="msg msg-{role}"><div class="msg-role">{role}</div>'
                         f"{render_markdown(message_content(m))}</div>")
        return "".join(parts) or '<p class="empty">(no messages)</p>'
    return render_markdown(value if isinstance(value, str) else str(value))


def response_text(value: Any) -> str:
    """The editable text of a response: the string itself, or the content of its last message."""
    if value is None:
        return ""
    if is_messages(value):
        return message_content(value[-1]) if value else ""
    return value if isinstance(value, str) else str(value)


def apply_edit(value: Any, text: str) -> Any:
    """Return the response with its text replaced by an edit, keeping the original structure."""
    if is_messages(value) and value:
        last = dict(value[-1])
        last["content"] = text
        return [*value[:-1], last]
    return text


