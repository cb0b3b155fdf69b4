"""What browser tests do the same way."""

import base64
import email
import email.policy
import re
from dataclasses import dataclass
from pathlib import Path

from tests.workspaces.factories import PASSWORD

# What a person types when signing up (the factories' PASSWORD is for rows made directly).
SIGNUP_PASSWORD = "Kestrel-Falcon-93!wing"
INVITE_LINK = re.compile(r"https?://[^\s\"'<>]+/invite/[^\s/\"'<>]+/")
CONFIRM_LINK = re.compile(r"https?://[^\s]+/accounts/confirm-email/[^\s]+/")


def log_in(page, email: str, base: str = "") -> None:
    """Log in through the real form (base: the server's URL when it is not live_server's)."""
    page.goto(f"{base}/accounts/login/")
    page.fill("input[name=login]", email)
    page.fill("input[name=password]", PASSWORD)
    with page.expect_navigation():
        page.click("form button[type=submit]")


def click_and_load(page, locator, timeout: float | None = None) -> None:
    """Click something that navigates, and wait until the page it leads to (after redirects) has
    loaded (within `timeout` ms, the context's default if None). A bare click() may return
    before the navigation starts, and page.url would then still be the old page's."""
    with page.expect_navigation(wait_until="load", timeout=timeout):
        locator.click(timeout=timeout)


def sign_up(page, email: str) -> None:
    form = page.locator("main form[action*='/accounts/signup/']")
    form.locator("[name=email]").fill(email)
    form.locator("[name=password1]").fill(SIGNUP_PASSWORD)
    form.locator("[name=password2]").fill(SIGNUP_PASSWORD)
    click_and_load(page, form.locator("button[type=submit]"))


def confirm_address(page, email: str, mails) -> None:
    """Sign-up's next step: open the link allauth mailed to `email`, then confirm it. `mails`:
    the messages sent so far (pytest-django's mailoutbox, or file_mails() of a server's)."""
    assert page.get_by_role("heading", level=1).inner_text() == "Confirm your email address"
    sent = [m for m in mails if m.to == [email] and "/accounts/confirm-email/" in m.body]
    assert sent, [(m.to, m.subject) for m in mails]
    page.goto(CONFIRM_LINK.search(sent[-1].body).group(0))
    click_and_load(page, page.locator("main form button[type=submit]"))


@dataclass
class Mail:
    to: list[str]
    subject: str
    body: str


def file_mails(folder: Path) -> list[Mail]:
    """What a server with EMAIL_URL=filemail:///<folder> has sent, oldest first (Django's file
    backend writes each connection's messages to a file, one after the other, each followed by
    a line of dashes)."""
    mails = []
    for path in sorted(folder.iterdir(), key=lambda p: p.stat().st_mtime_ns):
        for raw in path.read_text().split("\n" + "-" * 79 + "\n"):
            if not raw.strip():
                continue
            message = email.message_from_string(raw.lstrip("\n"), policy=email.policy.default)
            part = message.get_body(preferencelist=("plain",)) or message
            mails.append(
                Mail(
                    to=[a.strip() for a in str(message["To"]).split(",")],
                    subject=str(message["Subject"]),
                    body=part.get_content(),
                )
            )
    return mails


def drop_file(page, path: Path, zone: str = "[data-testid=dropzone]", mime: str = "image/jpeg"):
    """Drops the file on the drop zone as a drag from the desktop does."""
    page.evaluate(
        """([b64, name, zone, mime]) => {
          const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
          const data = new DataTransfer();
          data.items.add(new File([bytes], name, { type: mime }));
          const target = document.querySelector(zone);
          for (const type of ["dragenter", "dragover", "drop"]) {
            target.dispatchEvent(
              new DragEvent(type, { dataTransfer: data, bubbles: true, cancelable: true })
            );
          }
        }""",
        [base64.b64encode(path.read_bytes()).decode(), path.name, zone, mime],
    )


# The labelling editor (annotation/templates/annotation/editor.html), through its test hooks.
EDITOR_READY = (
    "() => window.kestrelEditor && window.kestrelEditor.ready()"
    " && window.kestrelEditor.imageLoaded()"
)


def editor_open(page, url: str) -> None:
    page.goto(url)
    page.wait_for_function(EDITOR_READY)


def editor_at(page, x: float, y: float) -> tuple[float, float]:
    """Page coordinates of a point in normalised image coordinates."""
    return tuple(page.evaluate("([x, y]) => window.kestrelEditor.toClient(x, y)", [x, y]))


def editor_drag(page, start, end) -> None:
    page.mouse.move(*editor_at(page, *start))
    page.mouse.down()
    page.mouse.move(*editor_at(page, *end), steps=8)
    page.mouse.up()


def editor_click(page, x: float, y: float, hold: str = "", **kwargs) -> None:
    """Clicks at a point of the image, holding the key `hold` (e.g. "Alt") if given."""
    if hold:
        page.keyboard.down(hold)
    page.mouse.click(*editor_at(page, x, y), **kwargs)
    if hold:
        page.keyboard.up(hold)


def editor_labels(page) -> list[dict]:
    return page.evaluate("window.kestrelEditor.labels()")


def editor_saved(page, revision: int) -> None:
    """Waits until the autosave has stored revision `revision` (or later)."""
    page.wait_for_function(
        "(r) => window.kestrelEditor.revision() >= r"
        " && document.querySelector('[data-testid=save-state]').dataset.state === 'saved'",
        arg=revision,
    )
    assert page.inner_text("[data-testid=save-state]") == "Saved"
