# Sessions move to core.UserSession (webapp.core.sessions): the unexpired ones of Django's table come along with
# their user, so nobody signed in is signed out by the upgrade.

from django.contrib.auth import SESSION_KEY
from django.db import migrations
from django.utils import timezone


def copy_sessions(apps, schema_editor):
    from django.contrib.sessions.backends.db import SessionStore

    Session = apps.get_model("sessions", "Session")
    UserSession = apps.get_model("core", "UserSession")
    User = apps.get_model("auth", "User")
    users = set(User.objects.values_list("pk", flat=True))
    decode = SessionStore().decode
    batch = []
    for session in Session.objects.filter(expire_date__gt=timezone.now()).iterator(chunk_size=1000):
        try:
            user_id = int(decode(session.session_data).get(SESSION_KEY))
        except (TypeError, ValueError):
            user_id = None
        batch.append(UserSession(session_key=session.session_key, session_data=session.session_data,
                                 expire_date=session.expire_date, user_id=user_id if user_id in users else None))
    UserSession.objects.bulk_create(batch, batch_size=1000, ignore_conflicts=True)


class Migration(migrations.Migration):

    dependencies = [
        ("core", "0005_user_sessions"),
        ("sessions", "0001_initial"),
    ]

    operations = [migrations.RunPython(copy_sessions, migrations.RunPython.noop)]
