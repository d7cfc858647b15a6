"""Sessions that carry their user: a request reads its session and its signed-in user in one query.

SESSION_ENGINE = "webapp.core.sessions". A session row holds its user's id as a column (set whenever the
session is saved), so loading the session joins the user. The authentication backend
(webapp.core.throttling.ThrottledModelBackend.get_user) takes that user instead of reading it again; Django's
own checks (the backend, is_active, the session's password hash) still run on it.
"""
from __future__ import annotations

import contextvars
import logging

from django.contrib.auth import SESSION_KEY
from django.contrib.sessions.backends.db import SessionStore as DBStore
from django.core.exceptions import SuspiciousOperation
from django.utils import timezone

# The user joined to the session this context loaded last (None: no session, or no user in it).
_loaded_user: contextvars.ContextVar = contextvars.ContextVar("session_user", default=None)


def take_session_user(user_id):
    """The user the current session was loaded with when it is `user_id`'s (once), else None."""
    user = _loaded_user.get()
    _loaded_user.set(None)
    if user is not None and str(user.pk) == str(user_id):
        return user
    return None


class SessionStore(DBStore):
    @classmethod
    def get_model_class(cls):
        from webapp.core.models import UserSession

        return UserSession

    def create_model_instance(self, data):
        obj = super().create_model_instance(data)
        try:
            obj.user_id = int(data.get(SESSION_KEY))
        except (TypeError, ValueError):
            obj.user_id = None
        return obj

    def _get_session_from_db(self):
        _loaded_user.set(None)
        try:
            session = (self.model.objects.select_related("user")
                       .get(session_key=self.session_key, expire_date__gt=timezone.now()))
        except (self.model.DoesNotExist, SuspiciousOperation) as e:
            if isinstance(e, SuspiciousOperation):
                logging.getLogger(f"django.security.{e.__class__.__name__}").warning(str(e))
            self._session_key = None
            return None
        _loaded_user.set(session.user)
        return session
