# Kestrel: one image for web (uvicorn), Celery workers and beat. See docker-compose.yml.
FROM python:3.11-slim

# PYTHONPATH=/app: every process (uvicorn, celery, manage.py) imports the apps from /app rather
# than the copy `pip install .` puts in site-packages (a wheel that runs on its own too, with its
# templates and static files: tests/config/test_wheel.py), so BASE_DIR is /app and var/, the one
# folder the kestrel user may write, is /app/var.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PYTHONPATH=/app \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    DJANGO_ENV=production

WORKDIR /app

# Dependencies in their own layer: rebuilt only when pyproject.toml changes.
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt

COPY . .
# Kestrel's own modules compiled once here (pip compiled the dependencies): with
# PYTHONDONTWRITEBYTECODE, every process, each trainer among them, compiled them again.
RUN pip install --no-deps . \
    && rm -rf build ./*.egg-info \
    && python -m compileall -q /app

# Static files are collected at build time. Production settings refuse to load without
# SECRET_KEY and ALLOWED_HOSTS: these two are dummies for this one command only and are not
# kept in the image's environment; the real ones come at run time.
RUN SECRET_KEY=collectstatic-build-only-not-a-secret ALLOWED_HOSTS=localhost \
        python manage.py collectstatic --noinput -v0

# Non-root user; it may write only var/ (media when no bucket is set, celery beat's schedule).
RUN useradd --system --user-group --uid 10001 --home-dir /app --no-create-home \
        --shell /usr/sbin/nologin kestrel \
    && mkdir -p var/media \
    && chown kestrel:kestrel var var/media
USER kestrel

EXPOSE 8000
# config.web: uvicorn, believing X-Forwarded-For only from TRUSTED_PROXIES.
CMD ["python", "-m", "config.web", "--host", "0.0.0.0", "--port", "8000", "--timeout-graceful-shutdown", "5"]
