"""JSON from clients, bounded in depth.

A thousand nested brackets make the parser — and whatever walks the value after it: validation, `json.dumps`
into the database, a template — recurse until Python gives up with a RecursionError, a 500. Nothing a client
sends here needs more than a few levels, so anything nested deeper than MAX_DEPTH is refused before it is
parsed: every JSON body by `webapp.core.middleware.JSONBodyMiddleware` (DRF and plain views alike), JSON inside
a form field by the fields below (`forms.JSONField` for pages, `JSONField` for API serializers).
"""
from __future__ import annotations

import json
import re

from django import forms
from rest_framework import serializers

MAX_DEPTH = 64
# a JSON string literal (escapes included); its brackets are text, not nesting
_STRING = re.compile(rb'"(?:[^"\\]++|\\.)*+"', re.S)
_NOT_BRACKETS = bytes(c for c in range(256) if c not in b"[]{}")


class JSONTooDeep(ValueError):
    def __init__(self, limit: int = MAX_DEPTH):
        super().__init__(f"The JSON is nested deeper than {limit} levels.")


def too_deep(raw: bytes | str, limit: int = MAX_DEPTH) -> bool:
    """Whether the JSON text `raw` opens more than `limit` arrays or objects inside one another.

    Read without parsing (strings skipped, brackets counted), so it cannot recurse itself."""
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogatepass")
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False
    depth = 0
    for byte in _STRING.sub(b"", raw).translate(None, _NOT_BRACKETS):
        if byte in b"[{":
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def loads(raw: bytes | str, **kwargs):
    """`json.loads`, refusing text nested deeper than MAX_DEPTH with JSONTooDeep (a ValueError)."""
    if too_deep(raw):
        raise JSONTooDeep()
    return json.loads(raw, **kwargs)


class FormJSONField(forms.JSONField):
    """Django's form JSONField, refusing JSON nested deeper than MAX_DEPTH with a form error."""

    def to_python(self, value):
        if isinstance(value, str | bytes) and too_deep(value):
            raise forms.ValidationError(str(JSONTooDeep()), code="too_deep")
        return super().to_python(value)


class JSONField(serializers.JSONField):
    """DRF's JSONField, refusing JSON nested deeper than MAX_DEPTH (a JSON string from a form field is parsed by
    the field; a JSON body was checked by the middleware before DRF parsed it)."""

    def to_internal_value(self, data):
        if isinstance(data, str | bytes) and (self.binary or getattr(data, "is_json_string", False)) \
                and too_deep(data):
            raise serializers.ValidationError(str(JSONTooDeep()), code="too_deep")
        return super().to_internal_value(data)
