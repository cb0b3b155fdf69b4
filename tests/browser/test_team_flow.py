"""A team's first day, driven through a real browser.

The owner signs up, creates the team workspace "Acme Vision" and invites a viewer; the viewer
follows the link from a separate browser (own cookies), signs up, accepts and joins; the viewer
is refused the members page; the owner then sees the viewer listed. Screenshots of every step go
to var/screenshots/. No console error, uncaught exception or Content-Security-Policy violation
may occur anywhere in the flow.
"""

import re

import pytest
from django.core.cache import cache

from tests.browser.helpers import INVITE_LINK, click_and_load, confirm_address, sign_up

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

OWNER = "owner@example.com"
VIEWER = "viewer@example.com"


def test_owner_invites_viewer_who_joins_and_is_refused_members_page(
    live_server, mailoutbox, new_page, browser_problems, screenshot
):
    cache.clear()  # allauth's signup/login rate limits live in the (Redis) cache

    # --- 1. The owner, in browser context A ---------------------------------------------------
    owner = new_page("A:owner")
    landing = owner.goto("/")
    assert landing is not None and landing.status == 200
    # The strict policy is really sent, so the console check below means something.
    policy = landing.headers.get("content-security-policy", "")
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy, policy
    expect_title(owner, "Vision AI on your own machines")
    css = owner.request.get(f"{live_server.url}/static/css/app.css")
    assert css.status == 200, css.status
    assert "text/css" in css.headers["content-type"]
    assert owner.evaluate(
        "[...document.styleSheets].some(s => s.href && s.href.endsWith('/static/css/app.css')"
        " && s.cssRules.length > 0)"
    ), "app.css is not applied to the page"
    screenshot(owner, "landing")

    click_and_load(owner, owner.get_by_role("link", name="Create an account"))
    assert "/accounts/signup/" in owner.url
    screenshot(owner, "owner-signup-form")
    sign_up(owner, OWNER)
    screenshot(owner, "owner-confirm-address")
    confirm_address(owner, OWNER, mailoutbox)
    assert re.search(r"/w/[\w-]+/$", owner.url), owner.url
    personal_url = owner.url
    assert owner.get_by_text("Personal workspace").is_visible()
    assert owner.get_by_test_id("my-role").inner_text() == "owner"
    screenshot(owner, "owner-personal-workspace")

    switcher = owner.get_by_test_id("workspace-switcher")
    switcher.locator("summary").click()
    screenshot(owner, "owner-switcher-open")
    click_and_load(owner, switcher.get_by_role("link", name="+ New team workspace"))
    assert owner.url.endswith("/workspaces/new/")
    owner.locator("main [name=name]").fill("Acme Vision")
    screenshot(owner, "owner-new-workspace-form")
    click_and_load(owner, owner.get_by_role("button", name="Create workspace"))
    match = re.search(r"/w/([\w-]+)/$", owner.url)
    assert match and owner.url != personal_url, owner.url
    slug = match.group(1)
    assert owner.get_by_role("heading", level=1).inner_text() == "Acme Vision"
    assert "Created the team workspace Acme Vision." in owner.locator(".messages").inner_text()
    assert owner.get_by_test_id("workspace-switcher").locator("summary").inner_text() == (
        "Acme Vision"
    )
    screenshot(owner, "owner-team-workspace")

    click_and_load(owner, owner.get_by_role("link", name="Members and invitations"))
    assert owner.url.endswith(f"/w/{slug}/members/")
    invite_form = owner.locator("main form[action$='/members/invite/']")
    invite_form.locator("[name=email]").fill(VIEWER)
    invite_form.locator("select[name=role]").select_option(label="Viewer")
    screenshot(owner, "owner-invite-form-filled")
    click_and_load(owner, invite_form.get_by_role("button", name="Send invitation"))
    assert owner.url.endswith(f"/w/{slug}/members/")
    flash = owner.locator(".messages .msg.success").inner_text()
    assert f"Invitation sent to {VIEWER}." in flash
    link_match = INVITE_LINK.search(flash)
    assert link_match, flash
    invite_link = link_match.group(0)
    assert invite_link.startswith(live_server.url)
    pending = owner.get_by_test_id("invitations")
    assert VIEWER in pending.inner_text() and "Viewer" in pending.inner_text()
    screenshot(owner, "owner-invitation-sent")

    invitation_mails = [m for m in mailoutbox if m.to == [VIEWER]]
    assert len(invitation_mails) == 1, [(m.to, m.subject) for m in mailoutbox]
    mail = invitation_mails[0]
    assert "Acme Vision" in mail.subject
    assert invite_link in mail.body
    assert "as viewer" in mail.body

    # --- 2. The viewer, in a separate browser context B ---------------------------------------
    viewer = new_page("B:viewer")
    viewer.goto(invite_link)
    # A link alone shows nothing of the team: whoever holds it must sign in first.
    heading = viewer.get_by_role("heading", level=1).inner_text()
    assert heading == "Sign in to see this invitation", heading
    assert "Acme Vision" not in viewer.locator("main").inner_text()
    screenshot(viewer, "viewer-invitation-anonymous")

    click_and_load(viewer, viewer.get_by_role("link", name="create an account"))
    assert "/accounts/signup/" in viewer.url and "next=" in viewer.url, viewer.url
    screenshot(viewer, "viewer-signup-form")
    sign_up(viewer, VIEWER)
    confirm_address(viewer, VIEWER, mailoutbox)
    assert viewer.url == invite_link, viewer.url  # allauth honoured ?next= through the mail
    assert viewer.get_by_role("heading", level=1).inner_text() == "Join Acme Vision"
    assert VIEWER in viewer.locator("main").inner_text()
    assert "as viewer" in viewer.locator("main").inner_text()
    screenshot(viewer, "viewer-invitation-signed-in")

    click_and_load(viewer, viewer.get_by_role("button", name="Accept and join"))
    assert viewer.url.endswith(f"/w/{slug}/"), viewer.url
    assert viewer.get_by_role("heading", level=1).inner_text() == "Acme Vision"
    assert viewer.get_by_test_id("my-role").inner_text() == "viewer"
    assert "Welcome to Acme Vision." in viewer.locator(".messages").inner_text()
    assert viewer.get_by_role("link", name="Members and invitations").count() == 0
    assert viewer.get_by_role("link", name="New project").count() == 0
    screenshot(viewer, "viewer-joined-workspace")

    # --- 3. The viewer may not open the members page ------------------------------------------
    members_url = f"{live_server.url}/w/{slug}/members/"
    response = viewer.goto(members_url)
    assert response is not None and response.status == 403
    expect_title(viewer, "Not allowed")
    assert viewer.get_by_role("heading", level=1).inner_text() == "Not allowed"
    assert viewer.get_by_test_id("members").count() == 0
    assert viewer.locator("form[action$='/members/invite/']").count() == 0
    screenshot(viewer, "viewer-members-forbidden")

    # --- 4. The owner sees the new member -----------------------------------------------------
    owner.reload()
    members = owner.get_by_test_id("members")
    row = members.locator("tr", has_text=VIEWER)
    assert row.count() == 1
    role_select = row.locator("select[name=role]")
    assert role_select.input_value() == "viewer"
    assert role_select.locator("option:checked").inner_text() == "Viewer"
    assert OWNER in members.inner_text()
    assert owner.get_by_test_id("invitations").count() == 0  # the invitation was used
    screenshot(owner, "owner-members-with-viewer")

    # --- No console errors, uncaught exceptions, CSP violations or broken requests ------------
    # The one expected error: Chromium logs the 403 document load of step 3.
    forbidden = [
        e for e in browser_problems.console_errors if "status of 403" in e and members_url in e
    ]
    console_errors = [e for e in browser_problems.console_errors if e not in forbidden]
    csp = [e for e in browser_problems.console_errors if "Content Security Policy" in e]
    assert not csp, csp
    assert not console_errors, console_errors
    assert not browser_problems.page_errors, browser_problems.page_errors
    assert not browser_problems.failed_requests, browser_problems.failed_requests
    assert browser_problems.bad_responses == [f"[B:viewer] 403 {members_url}"], (
        browser_problems.bad_responses
    )


def expect_title(page, title: str) -> None:
    assert page.title() == f"{title} · Kestrel", page.title()
