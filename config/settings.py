"""Kestrel settings, read from the environment (django-environ); see .env.example.

DJANGO_ENV=development (default) is the quick start: SQLite in WAL mode under var/, media under
var/media/, Redis on localhost. DJANGO_ENV=production requires SECRET_KEY and ALLOWED_HOSTS and
turns on every `check --deploy` setting.
"""

import hashlib
from datetime import timedelta
from pathlib import Path

import environ
from celery.schedules import crontab
from csp.constants import NONE, SELF

from config import env_file
from config.secrets import install_secret

BASE_DIR = Path(__file__).resolve().parent.parent
env = environ.Env()
env_file.read()  # the checkout's .env; the environment wins over it
VAR_DIR = BASE_DIR / env.str("KESTREL_VAR_DIR", default="var")  # scripts/run.sh sets it

DJANGO_ENV = env.str("DJANGO_ENV", default="development")
PRODUCTION = DJANGO_ENV == "production"

# Off unless asked for (DEBUG=1), the quick start included: a debug page shows settings and
# paths to whoever triggers an error, and even then only superusers see one (config/errors.py).
DEBUG = env.bool("DEBUG", default=False)
if PRODUCTION:
    SECRET_KEY = env.str("SECRET_KEY")  # no default: refuse to start without one
    ALLOWED_HOSTS = env.list("ALLOWED_HOSTS")
else:
    # The quick start's key is random per install, written once into var/ and never printed:
    # a public default would let anyone forge sessions and every token the server mints.
    SECRET_KEY = env.str("SECRET_KEY", default="") or install_secret(VAR_DIR / "secret_key")
    ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])
SITE_URL = env.str("SITE_URL", default="http://127.0.0.1:8000")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "allauth",
    "allauth.account",
    "django_htmx",
    "template_partials",
    "ninja",
    "csp",
    "workspaces",
    "billing",
    "datasets",
    "training",
    "annotation",
    "deploy",
    "evaluations",
    "sweeps",
]

# Sessions in the database, read through the cache (Redis): a browser's predict call whose
# caller lookup lapsed read its session from PostgreSQL in 1.1 ms, from Redis in 0.2
# (bench/predict.py, issue 28). Sign-outs and expiry are the database's as before; a cache
# that is away is a miss (config.cache), and the database answers.
SESSION_ENGINE = "django.contrib.sessions.backends.cached_db"

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "allauth.account.middleware.AccountMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"
ASGI_APPLICATION = "config.asgi.application"

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
                "workspaces.context_processors.workspace_nav",
                "workspaces.context_processors.mail_delivery",
            ],
        },
    },
]

# Database: SQLite (WAL) for the quick start, PostgreSQL everywhere else.
DATABASES = {
    "default": env.db_url("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'kestrel.sqlite3'}"),
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    Path(DATABASES["default"]["NAME"]).parent.mkdir(parents=True, exist_ok=True)
    DATABASES["default"]["OPTIONS"] = {
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
    }
elif env.bool("DB_POOL", default=False):
    # Under ASGI, Django runs each request's sync code on a thread of its own, so a thread's
    # persistent connection is never reused and every request would connect afresh (Django's
    # docs: disable persistent connections there, pool instead). config/asgi.py turns this on;
    # workers and commands keep one persistent connection per process.
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": env.int("DB_POOL_MIN_SIZE", default=2),
        # Above training.live.DB_CONCURRENCY (open live pages reading at once), with room for
        # the rest; PostgreSQL allows 100 connections by default.
        "max_size": env.int("DB_POOL_MAX_SIZE", default=24),
        "timeout": 10,  # seconds a request waits for a free connection before failing
    }
else:
    DATABASES["default"].setdefault("CONN_MAX_AGE", env.int("CONN_MAX_AGE", default=60))
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
# The predict calls' caller lookup as a statement prepared on each PostgreSQL connection
# (workspaces.selectors): off behind a pooler that cannot keep prepared statements (PgBouncer's
# transaction mode before 1.21).
DB_PREPARED_LOOKUPS = env.bool("DB_PREPARED_LOOKUPS", default=True)
if DB_PREPARED_LOOKUPS and DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # Planned once for any values: prepared statements are these lookups alone (Django
    # prepares none), and PostgreSQL's own choice planned each call's values again.
    _options = DATABASES["default"].setdefault("OPTIONS", {})
    _options["options"] = (
        _options.get("options", "") + " -c plan_cache_mode=force_generic_plan"
    ).strip()
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env.str("REDIS_URL", default="redis://127.0.0.1:6379/0")
CACHES = {
    "default": {
        # Django's Redis cache, riding out a Redis that is away: a miss, not a 500.
        "BACKEND": "config.cache.TolerantRedisCache",
        "LOCATION": env.str("CACHE_URL", default=REDIS_URL),
        "KEY_PREFIX": env.str("CACHE_KEY_PREFIX", default="kestrel"),
        "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 2},
    }
}

AUTH_USER_MODEL = "workspaces.User"
AUTHENTICATION_BACKENDS = [
    "django.contrib.auth.backends.ModelBackend",
    "allauth.account.auth_backends.AuthenticationBackend",
]
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "account_login"
LOGIN_REDIRECT_URL = "home"
ACCOUNT_LOGOUT_REDIRECT_URL = "home"

# django-allauth: email is the login; rate limits live in the shared cache (Redis), so every
# web process counts the same failed attempts.
ACCOUNT_ADAPTER = "workspaces.adapters.AccountAdapter"
ACCOUNT_USER_MODEL_USERNAME_FIELD = None
ACCOUNT_LOGIN_METHODS = {"email"}
ACCOUNT_SIGNUP_FIELDS = ["email*", "password1*", "password2*"]
ACCOUNT_UNIQUE_EMAIL = True
# Mandatory: an invitation is accepted only by an account that proved it reads mail at the
# invited address, and only then can signup hide whether an address is registered (allauth
# mails the owner instead of saying so on the page). The quick start prints mails in the
# terminal running `make run`, and its "verify your address" page says so.
ACCOUNT_EMAIL_VERIFICATION = env.str("ACCOUNT_EMAIL_VERIFICATION", default="mandatory")
ACCOUNT_PREVENT_ENUMERATION = True
# Opening the confirmation link in the browser that signed up finishes signing in, and goes on
# to where the person was headed (an invitation); a link opened anywhere else only confirms.
ACCOUNT_LOGIN_ON_EMAIL_CONFIRMATION = True
ACCOUNT_LOGIN_ON_PASSWORD_RESET = True
ACCOUNT_SESSION_REMEMBER = None
ACCOUNT_RATE_LIMITS = {
    "login": "30/m/ip",
    "login_failed": env.str("LOGIN_FAILED_RATE_LIMIT", default="10/m/ip,5/300s/key"),
    "signup": "20/m/ip",
    "reset_password": "20/m/ip,5/m/key",
}

# Email: console in development, SMTP (EMAIL_URL=smtp://user:pass@host:587/?tls=True) by settings.
EMAIL_CONFIG = env.email_url(
    "EMAIL_URL",
    default="consolemail://" if not PRODUCTION else "smtp://localhost:25",
)
vars().update(EMAIL_CONFIG)
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="Kestrel <noreply@kestrel.local>")

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
# Outside production, WhiteNoise also serves straight from the apps' static folders, so the
# quick start (DEBUG off) needs no collectstatic after an edit.
WHITENOISE_USE_FINDERS = not PRODUCTION
STATICFILES_DIRS = [BASE_DIR / "static"]
MEDIA_URL = "media/"
MEDIA_ROOT = Path(env.str("MEDIA_ROOT", default=str(VAR_DIR / "media")))

# Object storage: local folder by default, S3 (or MinIO) when a bucket is named. No stored file
# has a public URL: views check access, then core/files.py streams it, hands it to the front
# server (STORAGE_ACCEL_REDIRECT, its internal location for MEDIA_ROOT) or redirects to a
# presigned S3 URL that lives STORAGE_URL_EXPIRE_SECONDS.
STORAGE_ACCEL_REDIRECT = env.str("STORAGE_ACCEL_REDIRECT", default="")
STORAGE_URL_EXPIRE_SECONDS = env.int("STORAGE_URL_EXPIRE_SECONDS", default=300)
AWS_STORAGE_BUCKET_NAME = env.str("AWS_STORAGE_BUCKET_NAME", default="")
if AWS_STORAGE_BUCKET_NAME:
    _default_storage = {
        "BACKEND": "storages.backends.s3.S3Storage",
        "OPTIONS": {
            "bucket_name": AWS_STORAGE_BUCKET_NAME,
            "endpoint_url": env.str("AWS_S3_ENDPOINT_URL", default="") or None,
            "region_name": env.str("AWS_S3_REGION_NAME", default="") or None,
            "access_key": env.str("AWS_ACCESS_KEY_ID", default="") or None,
            "secret_key": env.str("AWS_SECRET_ACCESS_KEY", default="") or None,
            "default_acl": None,
            "file_overwrite": False,
            "querystring_auth": True,
            "querystring_expire": STORAGE_URL_EXPIRE_SECONDS,
            "signature_version": "s3v4",
        },
    }
else:
    _default_storage = {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": str(MEDIA_ROOT), "base_url": "/" + MEDIA_URL},
    }
STORAGES = {
    "default": _default_storage,
    "staticfiles": {
        "BACKEND": "config.storage.StaticStorage"
        if PRODUCTION
        else "django.contrib.staticfiles.storage.StaticFilesStorage"
    },
}

# Celery: JSON only, one message prefetched at a time. Long work (training) never sits in one
# unacknowledged message: the job row owns its state, so acks_late stays off by default and is
# set per task only on short idempotent tasks. The visibility timeout is longer than any task's
# hard time limit, so Redis never redelivers a message that is still being worked on.
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default=REDIS_URL)
# Results are kept only by the few tasks a request waits on (the editor's model calls), for an
# hour, in the broker's Redis; every other task ignores its result.
CELERY_RESULT_BACKEND = env.str("CELERY_RESULT_BACKEND", default=CELERY_BROKER_URL)
CELERY_RESULT_EXPIRES = 3600
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ACKS_LATE = False
CELERY_TASK_SOFT_TIME_LIMIT = 10 * 60
CELERY_TASK_TIME_LIMIT = 15 * 60
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 60 * 60}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A broker (Redis) that goes away is reconnected to for as long as it takes, and the tasks
# running meanwhile go on: a training run outlives a Redis restart (training/process/follow.py).
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
CELERY_TASK_DEFAULT_QUEUE = env.str("CELERY_DEFAULT_QUEUE", default="default")
# Training runs have their own queue (workers sized for them); the reaper stays on default.
TRAINING_QUEUE = env.str("TRAINING_QUEUE", default="training")
CELERY_TASK_ROUTES = {"training.run_job": {"queue": TRAINING_QUEUE}}
CELERY_TIMEZONE = "UTC"
CELERY_BEAT_SCHEDULE = {
    # Dedicated endpoints that died are restarted; inference usage counts reach the database.
    "deploy-deployments-check": {"task": "deploy.deployments_check", "schedule": 30.0},
    "deploy-usage-flush": {"task": "deploy.usage_flush", "schedule": 60.0},
    "invitations-purge-expired": {
        "task": "workspaces.invitations_purge_expired",
        "schedule": crontab(minute=17),
    },
    "uploads-expire-stale": {
        "task": "datasets.uploads_expire_stale",
        "schedule": crontab(minute=23),
    },
    # The reaper: every long job's row holds a lease its worker renews; a row whose lease ran
    # out (its worker died) is given to another worker, or failed with a reason after
    # LONG_JOB_MAX_ATTEMPTS, for every kind the apps registered (core/leases.py). Training
    # keeps its own lease, reaped alike.
    "long-jobs-reap": {"task": "core.long_jobs_reap", "schedule": 60.0},
    # Sweeps: record ended trials, prune, start the next ones (sweeps.services.advance).
    "sweeps-advance-due": {"task": "sweeps.advance_due", "schedule": 2.0},
    # Without SkyPilot configured and installed it returns at once.
    "skypilot-reconcile": {"task": "training.skypilot_reconcile", "schedule": 120.0},
    "blobs-collect-garbage": {
        "task": "datasets.blobs_collect_garbage",
        "schedule": crontab(hour=3, minute=41),
    },
    # Daily, not monthly: once per workspace and month, so a missed first of the month is
    # caught up the next day.
    "billing-grant-monthly": {
        "task": "billing.grant_monthly",
        "schedule": crontab(hour=0, minute=7),
    },
}
# A long job's lease: renewed every third of it while the worker lives, reaped once it ran out.
LONG_JOB_LEASE_SECONDS = env.float("LONG_JOB_LEASE_SECONDS", default=90.0)
LONG_JOB_MAX_ATTEMPTS = env.int("LONG_JOB_MAX_ATTEMPTS", default=3)
# A long job whose database connection fails (a restart, a failover) connects again and goes
# on, for as long as the database has been away less than this; then it goes back to the queue.
LONG_JOB_DB_RETRY_SECONDS = env.float("LONG_JOB_DB_RETRY_SECONDS", default=45.0)

INVITATION_MAX_AGE = timedelta(days=14)
DATASET_MAX_IMAGE_PIXELS = env.int("DATASET_MAX_IMAGE_PIXELS", default=64_000_000)
# Seconds of decoding one video may take in an import; its frames past that are left out.
DATASET_VIDEO_MAX_SECONDS = env.int("DATASET_VIDEO_MAX_SECONDS", default=300)
DATASET_UPLOAD_CHUNK_BYTES = 8 * 1024 * 1024
DATASET_THUMBNAIL_PX = 256
# Training: where runs, cached datasets and checkpoints live on a machine that trains; where
# pretrained weights (yolo11n.pt, ...) are looked for; whether Ultralytics may download them.
TRAINING_DIR = Path(env.str("TRAINING_DIR", default=str(VAR_DIR / "training")))
TRAINING_WEIGHTS_DIR = Path(env.str("TRAINING_WEIGHTS_DIR", default=str(VAR_DIR / "weights")))
TRAINING_ALLOW_DOWNLOADS = env.bool("TRAINING_ALLOW_DOWNLOADS", default=True)
TRAINING_REDIS_URL = env.str("TRAINING_REDIS_URL", default=REDIS_URL)
# The supervising task beats this often; a job silent for three beats is resumed elsewhere.
TRAINING_HEARTBEAT_SECONDS = env.float("TRAINING_HEARTBEAT_SECONDS", default=10.0)
# A run of stock ultralytics on a user's machine (an external job) whose client says nothing
# for this long is marked lost; its console alone speaks every few seconds while it trains.
TRAINING_EXTERNAL_SILENT_SECONDS = env.float("TRAINING_EXTERNAL_SILENT_SECONDS", default=900.0)
TRAINING_MAX_ATTEMPTS = 3
# A trainer that makes no progress (no batch, validation batch or epoch) for longer than its own
# pace allows is hung: its attempt ends and the job resumes from its checkpoint. The allowance
# is FACTOR times the longest gap between its progress so far, never under FLOOR nor over
# CEILING seconds; a phase of unknown length (starting, the first validation, the final one)
# gets the ceiling.
TRAINING_STALL_FLOOR_SECONDS = env.float("TRAINING_STALL_FLOOR_SECONDS", default=60.0)
TRAINING_STALL_CEILING_SECONDS = env.float("TRAINING_STALL_CEILING_SECONDS", default=1800.0)
TRAINING_STALL_FACTOR = env.float("TRAINING_STALL_FACTOR", default=10.0)
# Checkpoints in a row that could not be stored (a full disk) before the run stops, keeping the
# last one that was: it goes on from there when a person resumes it.
TRAINING_CHECKPOINT_STORE_FAILURES = env.int("TRAINING_CHECKPOINT_STORE_FAILURES", default=3)
# Providers this server may use: "local" (this machine) always; cloud ones when configured.
TRAINING_PROVIDERS = env.list("TRAINING_PROVIDERS", default=["local"])
# SkyPilot (pip install -e '.[cloud]'; TRAINING_PROVIDERS=local,skypilot): what each GPU type
# rents, for types whose options are not set in the admin: JSON {"h100": {"accelerators": "H100",
# "use_spot": true, ...}} (the options: training.providers.skypilot_options.OPTION_KEYS).
# Cloud credentials stay where SkyPilot reads them.
TRAINING_SKYPILOT_TYPES = env.json("TRAINING_SKYPILOT_TYPES", default={})
# Set: trainers send their events over HTTP to this Kestrel (what a cloud machine that cannot
# reach Redis does), e.g. https://kestrel.example.com. Empty: straight to Redis.
TRAINING_EVENTS_URL = env.str("TRAINING_EVENTS_URL", default="")
# The command provider (training/providers/command.py): the command that reaches the training
# machine (e.g. "ssh -T gpu-box"), the Python with Kestrel's code there, the trainer's folder.
TRAINING_COMMAND = env.str("TRAINING_COMMAND", default="")
TRAINING_COMMAND_PYTHON = env.str("TRAINING_COMMAND_PYTHON", default="python3")
TRAINING_COMMAND_WORKDIR = env.str("TRAINING_COMMAND_WORKDIR", default="")
# Stripe top-ups (test or live keys); both empty: top-ups are off and admins grant credits.
STRIPE_SECRET_KEY = env.str("STRIPE_SECRET_KEY", default="")
STRIPE_WEBHOOK_SECRET = env.str("STRIPE_WEBHOOK_SECRET", default="")
STRIPE_CURRENCY = env.str("STRIPE_CURRENCY", default="usd")
API_KEY_LAST_USED_RESOLUTION = timedelta(minutes=1)
# How long a web process may keep a predict caller's lookup at most (deploy.api): any change
# made through Django reaches the next call at once (core.table_changes); this bounds one made
# behind Django's back. 0: look every call up.
PREDICT_KEY_KEPT_SECONDS = env.float("PREDICT_KEY_KEPT_SECONDS", default=10.0)
# A client address whose predict calls keep being refused (4xx) has each refusal past
# REFUSALS_FREE within REFUSALS_WINDOW_SECONDS held REFUSAL_PAUSE_SECONDS before it is sent,
# per web process (core.refusal_pacing): one caller sending bad input in a loop cannot take
# the web's time from everyone else's calls. Good calls are never held.
REFUSALS_FREE = env.int("REFUSALS_FREE", default=20)
REFUSALS_WINDOW_SECONDS = env.float("REFUSALS_WINDOW_SECONDS", default=10.0)
REFUSAL_PAUSE_SECONDS = env.float("REFUSAL_PAUSE_SECONDS", default=0.25)
# ...and while an address is past REFUSALS_FREE, its predict calls answered this many at a time.
PACED_CALLS_AT_ONCE = max(1, env.int("PACED_CALLS_AT_ONCE", default=4))
# Inference: the shared model server (python -m deploy.inference.server) web processes forward
# predictions to, the token they present to it (and to dedicated endpoints), the ports
# dedicated endpoints take on this machine, and whether callers may send image URLs.
INFERENCE_URL = env.str("INFERENCE_URL", default="http://127.0.0.1:8765")
INFERENCE_TOKEN = (
    env.str("INFERENCE_TOKEN", default="")
    or hashlib.sha256(f"kestrel-inference:{SECRET_KEY}".encode()).hexdigest()
)
DEPLOY_PORTS = range(
    env.int("DEPLOY_PORT_FIRST", default=8800), env.int("DEPLOY_PORT_LAST", default=8899) + 1
)
DEPLOY_HOST = env.str("DEPLOY_HOST", default="127.0.0.1")  # where dedicated endpoints listen
PREDICT_MAX_BODY_BYTES = 20 * 1024 * 1024
PREDICT_URL_SOURCES = env.bool("PREDICT_URL_SOURCES", default=False)
# Segment Anything in the editor: a local Ultralytics SAM weights file (e.g. mobile_sam.pt).
# Empty: the editor's SAM button says what is missing. GrabCut works without it.
ANNOTATION_SAM_WEIGHTS = env.str("KESTREL_SAM_WEIGHTS", default="")

MESSAGE_TAGS = {40: "error"}

# Error pages: under DEBUG, the technical page only for a signed-in superuser (config/errors.py).
DEFAULT_EXCEPTION_REPORTER = "config.errors.SuperuserOnlyExceptionReporter"
# Front servers whose X-Forwarded-For the web server believes (comma-separated addresses).
# Empty: none, so a client cannot pick the address rate limits count (config/web.py).
TRUSTED_PROXIES = env.list("TRUSTED_PROXIES", default=[])
# Requests are bounded before they are read (core/request_guard.py, config/body_limits.py;
# the README's "Request limits"): a request's line and headers arrive within
# REQUEST_HEADER_TIMEOUT_SECONDS; its body within REQUEST_BODY_TIMEOUT_SECONDS plus a second
# for every REQUEST_BODY_MIN_BYTES_PER_SECOND bytes that arrived; and a web process receives
# at most UPLOADS_PER_ADDRESS uploads (bodies past what a caller without credentials may send)
# at once from one client address, and UPLOADS_PER_CALLER for one account, key or run; or more,
# while they come to at most UPLOAD_BYTES_PER_ADDRESS and UPLOAD_BYTES_PER_CALLER in all (a
# client predicting on many photos at once: the worst they may hold is no more than the caps'
# of the largest predict bodies).
REQUEST_HEADER_TIMEOUT_SECONDS = env.float("REQUEST_HEADER_TIMEOUT_SECONDS", default=10.0)
REQUEST_BODY_TIMEOUT_SECONDS = env.float("REQUEST_BODY_TIMEOUT_SECONDS", default=20.0)
REQUEST_BODY_MIN_BYTES_PER_SECOND = env.int("REQUEST_BODY_MIN_BYTES_PER_SECOND", default=1024)
UPLOADS_PER_ADDRESS = env.int("UPLOADS_PER_ADDRESS", default=16)
UPLOADS_PER_CALLER = env.int("UPLOADS_PER_CALLER", default=6)
UPLOAD_BYTES_PER_ADDRESS = env.int("UPLOAD_BYTES_PER_ADDRESS", default=256 * 2**20)
UPLOAD_BYTES_PER_CALLER = env.int("UPLOAD_BYTES_PER_CALLER", default=96 * 2**20)

# Content security policy: same-origin scripts only, never inline.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF, "data:"],
        "font-src": [SELF],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [SELF],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    }
}

if PRODUCTION:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=True)
    SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=60 * 60 * 24 * 365)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_REFERRER_POLICY = "same-origin"
    X_FRAME_OPTIONS = "DENY"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "filters": {"permission_denied": {"()": "config.log_filters.PermissionDeniedOneLine"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    "loggers": {
        # httpx logs every request at INFO: a line per prediction forwarded to a model server.
        "httpx": {"level": "WARNING"},
        "httpcore": {"level": "WARNING"},
        # A 403 is one line with its reason, not a traceback per refusal.
        "django.request": {"filters": ["permission_denied"]},
    },
}
