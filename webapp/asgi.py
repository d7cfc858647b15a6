import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
application = get_asgi_application()

from webapp.core.startup import freeze_startup_heap  # noqa: E402 - needs the apps loaded above

freeze_startup_heap()
