"""The source of pretrained weights as the form's reachability check meets it, at the edge of
the world: a local HTTP server of the test's own (reachable), or a closed port (unreachable),
set as TRAINING_WEIGHTS_SOURCE_URL."""

import http.server
import threading

import pytest

from tests.servers import free_port


class _Releases(http.server.BaseHTTPRequestHandler):
    def do_HEAD(self):  # noqa: N802 - http.server's name
        self.server.heads += 1
        self.send_response(302)  # as github.com answers a release page
        self.send_header("Location", "/ultralytics/assets/releases/tag/v8.4.0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def weights_source_up(settings):
    """A source that answers; yields the server (its `heads` counts the checks)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Releases)
    server.heads = 0
    threading.Thread(target=server.serve_forever, daemon=True).start()
    settings.TRAINING_ALLOW_DOWNLOADS = True
    settings.TRAINING_WEIGHTS_SOURCE_URL = (
        f"http://127.0.0.1:{server.server_address[1]}/ultralytics/assets/releases"
    )
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def weights_source_down(settings):
    """A source nothing listens at (a port just freed): the connection is refused."""
    settings.TRAINING_ALLOW_DOWNLOADS = True
    settings.TRAINING_WEIGHTS_SOURCE_URL = f"http://127.0.0.1:{free_port()}/releases"
