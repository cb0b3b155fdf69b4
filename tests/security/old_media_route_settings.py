"""Test settings that put back the public media route Kestrel had under DEBUG, so a test can
show scripts/security_probe.py catching it (tests/security/test_probe.py)."""

from config.test_settings import *  # noqa: F403

ROOT_URLCONF = "tests.security.old_media_route_urls"
