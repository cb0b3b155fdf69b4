"""Waits the tests of per-minute limits share: deploy.ratelimit counts calls in the clock
minute, so a burst that crosses into the next one is counted in two windows."""

import time


def well_inside_a_minute(margin: float = 10.0) -> None:
    """Return at once if at least `margin` seconds of this clock minute are left; otherwise
    wait for the next minute to start."""
    left = 60 - time.time() % 60
    if left < margin:
        time.sleep(left + 0.1)
