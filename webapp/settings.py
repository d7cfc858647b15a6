"""Settings for RLHF Workbench, read from environment variables only.

Embedded defaults (SQLite, a filesystem Celery broker) let `./run` work on a bare machine;
DATABASE_URL and REDIS_URL switch to PostgreSQL and Redis.
"""
from __future__ import annotations

import os
from pathlib import Path

import plotly

from webapp.env import envbool, envfloat, envint, envlist, envsecret, envstr, local_secret_key, parse_database_url

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(envstr("WORKBENCH_VAR_DIR", str(BASE_DIR / "var"))).resolve()
VAR_DIR.mkdir(parents=True, exist_ok=True)

# Off unless asked for: a debug page shows settings and code. Error pages mask credentials either way.
DEBUG = envbool("DEBUG", False)
DEFAULT_EXCEPTION_REPORTER_FILTER = "webapp.core.reporting.SafeReporterFilter"
# SECRET_KEY / SECRET_KEY_FILE, else a random key made on first start and kept in var/ (mode 0600).
SECRET_KEY = envsecret("SECRET_KEY") or local_secret_key(VAR_DIR / "secret_key")

ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "webapp.core",
    "webapp.registry",
    "webapp.datasets",
    "webapp.review",
    "webapp.rewards",
    "webapp.runs",
    "webapp.monitoring",
    "webapp.notifications",
    "webapp.overview",
    "jobs",  # creates the Celery app at start-up: services send tasks by name (webapp.core.queue)
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "webapp.core.middleware.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "webapp.core.middleware.LoginRequiredMiddleware",
    "webapp.core.middleware.OutOfRangeMiddleware",
    "webapp.core.middleware.JSONBodyMiddleware",
]

ROOT_URLCONF = "webapp.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "webapp.core.context_processors.workbench",
            ],
        },
    },
]
WSGI_APPLICATION = "webapp.wsgi.application"
ASGI_APPLICATION = "webapp.asgi.application"

DATABASE_URL = envstr("DATABASE_URL", f"sqlite:///{VAR_DIR / 'db.sqlite3'}")
DATABASES = {"default": parse_database_url(DATABASE_URL)}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # A file, not :memory:, so that a real worker process started by the tests sees the test data.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test.sqlite3")}
    # Web, worker, beat and the CLI write to one file. WAL lets readers run beside the writer;
    # IMMEDIATE takes the write lock when a transaction begins, so two transactions never deadlock
    # upgrading a read lock (SQLite answers that with an instant "database is locked", bypassing
    # the busy timeout); the timeout then queues writers instead of failing them.
    DATABASES["default"]["OPTIONS"] = {
        "timeout": envint("SQLITE_BUSY_TIMEOUT_S", 30),
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL",
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
AUTHENTICATION_BACKENDS = ["webapp.core.throttling.ThrottledModelBackend"]
# Sign-in lockout (webapp.core.throttling): per username and address, and per address.
LOGIN_MAX_FAILURES = envint("LOGIN_MAX_FAILURES", 5)
LOGIN_MAX_FAILURES_PER_IP = envint("LOGIN_MAX_FAILURES_PER_IP", 50)
LOGIN_LOCKOUT_S = envint("LOGIN_LOCKOUT_S", 15 * 60)
# Who may create projects: "staff" (staff accounts) or "everyone" (any signed-in user).
PROJECT_CREATORS = envstr("PROJECT_CREATORS", "staff")
if PROJECT_CREATORS not in ("staff", "everyone"):
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(f"PROJECT_CREATORS must be 'staff' or 'everyone', not {PROJECT_CREATORS!r}")
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = VAR_DIR / "static"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
# plotly.js ships inside the plotly wheel: serve it from there, never from a CDN.
STATICFILES_DIRS = [
    BASE_DIR / "webapp" / "static",
    ("plotly", Path(plotly.__file__).resolve().parent / "package_data"),
]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"
                    if not DEBUG else "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True

MEDIA_ROOT = VAR_DIR / "media"
MEDIA_URL = "/media/"
RUNS_ROOT = Path(envstr("RUNS_ROOT", str(VAR_DIR / "runs"))).resolve()
MODELS_ROOT = Path(envstr("MODELS_ROOT", str(VAR_DIR / "models"))).resolve()
# Folders besides MODELS_ROOT from which models may be registered by path (os.pathsep-separated);
# the app's own data folders stay refused even when one of these contains them.
MODEL_ROOTS = [str(Path(p).resolve()) for p in envstr("MODEL_ROOTS", "").split(os.pathsep) if p.strip()]
# Folders whose `<root>/<project slug>/...` runs written outside the app (VERL, TRL) may be attached to that project.
ATTACH_ROOTS = [str(Path(p).resolve()) for p in envstr("ATTACH_ROOTS", "").split(os.pathsep) if p.strip()]
ATTACH_IDLE_S = envint("ATTACH_IDLE_S", 24 * 3600)  # an attached run silent this long is no longer followed

# Uploads stream to temporary files above this size, so a 1 GB dataset never sits in memory.
FILE_UPLOAD_MAX_MEMORY_SIZE = 2 * 1024 * 1024
DATA_UPLOAD_MAX_MEMORY_SIZE = 10 * 1024 * 1024
DATASET_MAX_UPLOAD_MB = envint("DATASET_MAX_UPLOAD_MB", 2048)
DATASET_MAX_TEXT_CHARS = envint("DATASET_MAX_TEXT_CHARS", 100_000)
# Uploads are ingested by a Celery task with progress, in a child process under DATASET_IMPORT_MEMORY_MB;
# above 0, uploads up to this size are imported in the web request instead (no memory cap there).
DATASET_SYNC_IMPORT_MB = envint("DATASET_SYNC_IMPORT_MB", 0)
DATASET_IMPORT_MEMORY_MB = envint("DATASET_IMPORT_MEMORY_MB", 2048)
# Parquet: the most a file may hold uncompressed (its footer) or decoded (its dictionaries).
DATASET_MAX_UNCOMPRESSED_MB = envint("DATASET_MAX_UNCOMPRESSED_MB", 8192)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.LimitOffsetPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_THROTTLE_CLASSES": ["webapp.core.throttling.AnonThrottle", "webapp.core.throttling.UserThrottle"],
    "DEFAULT_THROTTLE_RATES": {"anon": envstr("API_THROTTLE_ANON", "60/minute"),
                               "user": envstr("API_THROTTLE_USER", "3000/minute")},
}
SPECTACULAR_SETTINGS = {
    "TITLE": "RLHF Workbench API",
    "DESCRIPTION": "Datasets, review, rewards, training jobs, metrics and checkpoints.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],  # the API's map is for members only
    # Swagger UI assets come from the sidecar package: no CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# Celery. `./run` starts a private redis-server on a unix socket under var/ and sets REDIS_URL to
# redis+socket://...: a real queue, crash-safe with its append-only file. Without REDIS_URL (unit tests,
# a machine without redis-server) the broker is a folder on disk, written atomically (jobs/fsbroker.py).
REDIS_URL = envstr("REDIS_URL", "")
_private_redis = VAR_DIR / "redis" / "url"
if not REDIS_URL and _private_redis.exists():
    # `./run` leaves its private redis-server's address here while it runs, so that the CLI in another
    # terminal enqueues where the worker listens.
    _url = _private_redis.read_text().strip()
    if Path(_url.partition("://")[2]).is_socket():
        REDIS_URL = _url
# redis-py (the throttle cache below) spells a unix socket unix://, kombu redis+socket://.
REDIS_CLIENT_URL = ("unix://" + REDIS_URL.removeprefix("redis+socket://")
                    if REDIS_URL.startswith("redis+socket://") else REDIS_URL)
CELERY_BROKER_URL = REDIS_URL or "filesystem://"
if not REDIS_URL:
    _broker_dir = VAR_DIR / "celery-broker"
    for _sub in ("queue", "processed", "control", "incoming"):
        (_broker_dir / _sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT = "jobs.fsbroker:Transport"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "queue"),
        "data_folder_out": str(_broker_dir / "queue"),
        "processed_folder": str(_broker_dir / "processed"),
        "store_processed": False,
        "control_folder": str(_broker_dir / "control"),
        # Messages are written here, then renamed into the queue: a reader never sees half a message.
        "incoming_folder": str(_broker_dir / "incoming"),
    }
else:
    # Tasks here are short (training runs are supervised processes, not tasks), so a visibility
    # timeout of an hour is far above any task's length.
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
# "throttle" holds sign-in failures and API rates: shared by every process (Redis, else files in var/).
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "throttle": ({"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_CLIENT_URL}
                 if REDIS_URL else {"BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
                                    "LOCATION": str(VAR_DIR / "cache" / "throttle")}),
}
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_DEFAULT_QUEUE = "cpu"
CELERY_TASK_TIME_LIMIT = envint("CELERY_TASK_TIME_LIMIT", 30 * 60)
CELERY_TASK_SOFT_TIME_LIMIT = CELERY_TASK_TIME_LIMIT - 30
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ALWAYS_EAGER = envbool("CELERY_TASK_ALWAYS_EAGER", False)
RUN_SYNC_INTERVAL_S = envfloat("RUN_SYNC_INTERVAL_S", 2.0)
# A sync is only worth running while it is fresh: after a worker outage the queued ones expire
# (the worker drops them unrun) instead of being worked off one by one ahead of launches.
RUN_SYNC_EXPIRES_S = envfloat("RUN_SYNC_EXPIRES_S", max(10.0, 3 * RUN_SYNC_INTERVAL_S))
CELERY_BEAT_SCHEDULE = {
    "sync-runs": {"task": "jobs.tasks.sync_runs", "schedule": RUN_SYNC_INTERVAL_S,
                  "options": {"expires": RUN_SYNC_EXPIRES_S}},
}
# Workers touch a file here every few seconds while they consume; the run page says "worker offline"
# when none is fresh.
WORKER_HEARTBEAT_DIR = Path(envstr("WORKER_HEARTBEAT_DIR", str(VAR_DIR / "heartbeats")))
WORKER_HEARTBEAT_S = envfloat("WORKER_HEARTBEAT_S", 5.0)
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
RUN_HEARTBEAT_STALE_S = envint("RUN_HEARTBEAT_STALE_S", 30)

# Reward sandbox limits (per call / per batch); user code never runs in this process.
REWARD_TIME_LIMIT_S = envfloat("REWARD_TIME_LIMIT_S", 5.0)
REWARD_BATCH_TIME_LIMIT_S = envfloat("REWARD_BATCH_TIME_LIMIT_S", 120.0)
REWARD_MEMORY_MB = envint("REWARD_MEMORY_MB", 1024)
# Sandboxes a test-run scores with at once (0: min(CPU cores, 4)).
REWARD_TEST_RUN_WORKERS = envint("REWARD_TEST_RUN_WORKERS", 0)
# Test-runs run on a worker (the usercode queue); a user may have this many queued or running at once, a
# project this many, and one test-run's reward code (loading and scoring) this many seconds of wall clock.
REWARD_TEST_RUNS_PER_USER = envint("REWARD_TEST_RUNS_PER_USER", 2)
REWARD_TEST_RUNS_PER_PROJECT = envint("REWARD_TEST_RUNS_PER_PROJECT", 4)
REWARD_TEST_RUN_TIME_LIMIT_S = envfloat("REWARD_TEST_RUN_TIME_LIMIT_S", 30.0)

# Production hardening (passes `manage.py check --deploy` with HTTPS=true). HTTPS says the site is
# served over TLS (directly or behind a proxy that sets X-Forwarded-Proto): secure cookies, HSTS.
HTTPS = envbool("HTTPS", False)
SECURE_SSL_REDIRECT = envbool("SECURE_SSL_REDIRECT", HTTPS)
# Sessions carry their user: the session and the signed-in user are one query a request.
SESSION_ENGINE = "webapp.core.sessions"
SESSION_COOKIE_SECURE = envbool("SESSION_COOKIE_SECURE", HTTPS)
CSRF_COOKIE_SECURE = envbool("CSRF_COOKIE_SECURE", HTTPS)
SECURE_HSTS_SECONDS = envint("SECURE_HSTS_SECONDS", 31536000 if HTTPS else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = HTTPS
SECURE_HSTS_PRELOAD = HTTPS
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
X_FRAME_OPTIONS = "DENY"
# Every page keeps to it (tests/browser/test_csp.py): scripts are static files, data goes in json_script
# blocks. Styles may be inline: Plotly and CodeMirror set them from script, and templates use a few.
CONTENT_SECURITY_POLICY = envstr("CONTENT_SECURITY_POLICY", "; ".join([
    "default-src 'self'", "script-src 'self'", "style-src 'self' 'unsafe-inline'", "img-src 'self' data: blob:",
    "font-src 'self' data:", "connect-src 'self'", "object-src 'none'", "base-uri 'self'", "form-action 'self'",
    "frame-ancestors 'none'"]))

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"client_errors_one_line": {"()": "webapp.core.logfilters.ClientErrorsOneLine"}},
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": envstr("LOG_LEVEL", "INFO")},
    # a 403 (or another 4xx answered for an exception) is one line, not a traceback
    "loggers": {"django.request": {"filters": ["client_errors_one_line"]}},
}

# Notifications: links in messages point here; e-mail goes to the console unless EMAIL_BACKEND is set.
SITE_URL = envstr("SITE_URL", "http://localhost:8000")
EMAIL_BACKEND = envstr("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
DEFAULT_FROM_EMAIL = envstr("DEFAULT_FROM_EMAIL", "workbench@localhost")
# Hook URLs may not reach loopback, private or link-local addresses (the database, Redis, cloud
# metadata) unless this is on (e.g. a receiver on the same host in development or tests).
NOTIFY_ALLOW_PRIVATE_HOSTS = envbool("NOTIFY_ALLOW_PRIVATE_HOSTS", False)
