"""What browser tests do the same way."""

from tests.workspaces.factories import PASSWORD


def log_in(page, email: str, base: str = "") -> None:
    """Log in through the real form (base: the server's URL when it is not live_server's)."""
    page.goto(f"{base}/accounts/login/")
    page.fill("input[name=login]", email)
    page.fill("input[name=password]", PASSWORD)
    with page.expect_navigation():
        page.click("form button[type=submit]")
