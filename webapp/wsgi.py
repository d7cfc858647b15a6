import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
application = get_wsgi_application()

from webapp.core.startup import freeze_startup_heap  # noqa: E402 - needs the apps loaded above

freeze_startup_heap()
