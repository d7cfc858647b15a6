"""Browser tests: the fixtures live in tests/browser_support.py (one Playwright for the whole session)."""
from __future__ import annotations

import pytest

from tests.browser_support import CHROMIUM, SCREENSHOTS, login  # noqa: F401 - re-exported for older imports


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    # Persona fixtures hash passwords; PBKDF2 costs ~0.3 s per user on a loaded 2-core machine.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


