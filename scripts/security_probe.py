"""Probe a running Kestrel for what one account, or nobody, can read of another account's data.

    .venv/bin/python scripts/security_probe.py http://127.0.0.1:8000 [--read-mail PATH]

It signs up two throwaway accounts through the real signup form (kestrel-probe-<random>-a and -b
at example.invalid). Each creates, in its personal workspace and through the API, a project, a
dataset holding one generated 8x8 PNG, a version of it and a read-only API key. Then, with GET
requests only, the other account (by session and by its key) and an anonymous caller try the
first one's pages, API objects and stored files, and the media paths where those files are
stored. Nothing else is written. A table says what held (404, 401, a login redirect) and what
did not.

When signup asks to verify the address, the probe follows the link only with --read-mail: the
server's console output saved to a file (`make run 2>&1 | tee var/log/run.log`), or the folder
of Django's file email backend. Without it, those steps are reported as skipped.

Bounded: at most --max-requests requests and --time-limit seconds, each request --timeout.
Exit status: 0 everything held; 1 something leaked; 2 nothing leaked but some checks could not
run (skipped steps, an import that did not finish, a page its owner could not read).
"""

import argparse
import hashlib
import http.cookiejar
import ipaddress
import json
import re
import secrets
import struct
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import zlib
from dataclasses import dataclass, field
from pathlib import Path

MEDIA = "/media/"
LOGIN = "/accounts/login/"


class OutOfBudget(Exception):
    pass


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None  # every 3xx comes back as it is: a login redirect is a result


@dataclass
class Answer:
    status: int
    headers: dict
    body: bytes

    @property
    def location(self) -> str:
        return self.headers.get("location", "")


class Budget:
    def __init__(self, max_requests: int, seconds: float):
        self.left = max_requests
        self.deadline = time.monotonic() + seconds

    def spend(self) -> None:
        if self.left <= 0 or time.monotonic() > self.deadline:
            raise OutOfBudget("the request or time budget ran out")
        self.left -= 1


class Session:
    """One caller: its own cookies (or none), and an optional API key."""

    def __init__(self, base: str, budget: Budget, timeout: float, key: str = ""):
        self.base, self.budget, self.timeout, self.key = base, budget, timeout, key
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(self.jar), _NoRedirects()
        )

    def cookie(self, name: str) -> str:
        return next((c.value for c in self.jar if c.name == name), "")

    def request(self, method: str, path: str, data: bytes | None = None, headers=None) -> Answer:
        self.budget.spend()
        headers = {"Referer": self.base + "/", **(headers or {})}
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        if method != "GET" and self.cookie("csrftoken"):
            headers["X-CSRFToken"] = self.cookie("csrftoken")
        url = self.base + path  # base is http(s), checked in main()
        req = urllib.request.Request(url, data=data, method=method, headers=headers)  # noqa: S310
        try:
            with self.opener.open(req, timeout=self.timeout) as response:
                return Answer(response.status, _lower(response.headers), response.read())
        except urllib.error.HTTPError as e:
            return Answer(e.code, _lower(e.headers), e.read())

    def get(self, path: str) -> Answer:
        return self.request("GET", path)

    def post_form(self, path: str, fields: dict) -> Answer:
        page = self.get(path)  # the form's CSRF cookie and token
        token = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', page.body)
        fields = {**fields, "csrfmiddlewaretoken": token.group(1).decode() if token else ""}
        body = urllib.parse.urlencode(fields).encode()
        form = {"Content-Type": "application/x-www-form-urlencoded"}
        return self.request("POST", path, body, form)

    def post_json(self, path: str, payload: dict) -> Answer:
        body = json.dumps(payload).encode()
        return self.request("POST", path, body, {"Content-Type": "application/json"})

    def post_file(self, path: str, name: str, data: bytes) -> Answer:
        boundary = secrets.token_hex(12)
        body = (
            (
                f"--{boundary}\r\n"
                f'Content-Disposition: form-data; name="file"; filename="{name}"\r\n'
                f"Content-Type: image/png\r\n\r\n"
            ).encode()
            + data
            + f"\r\n--{boundary}--\r\n".encode()
        )
        kind = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
        return self.request("POST", path, body, kind)


def _lower(headers) -> dict:
    return {k.lower(): v for k, v in headers.items()}


def tiny_png() -> bytes:
    """An 8x8 PNG of random pixels: new bytes (a new blob) on every run."""
    raw = b"".join(b"\x00" + secrets.token_bytes(8 * 3) for _ in range(8))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    header = struct.pack(">IIBBBBB", 8, 8, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw))
        + (chunk(b"IEND", b""))
    )


@dataclass
class Account:
    email: str
    password: str
    session: Session
    slug: str = ""
    key_session: Session | None = None
    pages: list[str] = field(default_factory=list)
    api: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)  # storage paths: no one may fetch these


@dataclass
class Row:
    what: str
    kind: str  # page, api, file
    results: dict  # caller -> status
    held: bool
    checked: bool  # False when the owner could not read it either (nothing was tested)


class Probe:
    def __init__(self, base: str, args):
        self.base, self.args = base, args
        self.budget = Budget(args.max_requests, args.time_limit)
        self.notes: list[str] = []
        self.incomplete = False

    def session(self, key: str = "") -> Session:
        return Session(self.base, self.budget, self.args.timeout, key)

    def note(self, text: str, *, incomplete: bool = True) -> None:
        self.notes.append(text)
        self.incomplete = self.incomplete or incomplete

    # --- accounts -------------------------------------------------------------------------

    def sign_up(self, tag: str, run: str) -> Account | None:
        account = Account(
            email=f"kestrel-probe-{run}-{tag}@example.invalid",
            password=secrets.token_urlsafe(18),
            session=self.session(),
        )
        s = account.session
        fields = {"email": account.email, "password1": account.password}
        answer = s.post_form("/accounts/signup/", {**fields, "password2": account.password})
        if answer.status not in (200, 302):
            self.note(f"signup of {account.email} answered {answer.status}")
            return None
        if self._signed_in(s):
            return account
        if not self.args.read_mail:
            self.note(
                f"{account.email}: signup asks to verify the address; skipped (rerun with "
                "--read-mail PATH: the server's console output or its file email folder)"
            )
            return None
        link = self._confirmation_link(account.email)
        if not link:
            self.note(f"{account.email}: no confirmation link found in {self.args.read_mail}")
            return None
        s.post_form(urllib.parse.urlsplit(link).path, {})
        s.post_form(LOGIN, {"login": account.email, "password": account.password})
        if not self._signed_in(s):
            self.note(f"{account.email}: could not sign in after confirming the address")
            return None
        self.note(f"{account.email}: address verified through the mail", incomplete=False)
        return account

    def _signed_in(self, s: Session) -> bool:
        return s.get("/api/v1/workspaces").status == 200

    def _confirmation_link(self, email: str) -> str:
        source = Path(self.args.read_mail)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            files = sorted(source.iterdir()) if source.is_dir() else [source]
            text = "".join(f.read_text(errors="replace") for f in files if f.is_file())
            # Each message begins with its headers; the link is in the one sent to this address.
            for message in text.split("\nTo: ")[1:]:
                if message.startswith(email):
                    found = re.search(r"https?://\S+/accounts/confirm-email/[^\s/]+/", message)
                    if found:
                        return found.group(0)
            time.sleep(0.5)
        return ""

    # --- what each account creates ----------------------------------------------------------

    def furnish(self, account: Account) -> None:
        s = account.session
        spaces = json.loads(s.get("/api/v1/workspaces").body)
        account.slug = next(w["slug"] for w in spaces if w["is_personal"])
        w = f"/w/{account.slug}"
        account.pages += [f"{w}/", f"{w}/projects/", f"{w}/datasets/", f"{w}/members/"]
        account.pages += [f"{w}/keys/", f"{w}/settings/", f"{w}/billing/", f"{w}/training/"]
        account.api += [f"/api/v1/workspaces/{account.slug}"]
        account.api += [f"/api/v1/workspaces/{account.slug}/{x}" for x in ("projects", "members")]
        project = s.post_json(f"/api/v1/workspaces/{account.slug}/projects", {"name": "Probe"})
        if project.status == 201:
            pk = json.loads(project.body)["id"]
            account.pages.append(f"{w}/projects/{pk}/")
            account.api.append(f"/api/v1/workspaces/{account.slug}/projects/{pk}")
        else:
            self.note(f"{account.email}: creating a project answered {project.status}")
        key = s.post_json(
            f"/api/v1/workspaces/{account.slug}/keys", {"name": "probe", "scopes": ["read"]}
        )
        if key.status == 201:
            account.key_session = self.session(key=json.loads(key.body)["key"])
        else:
            self.note(f"{account.email}: creating an API key answered {key.status}")
        dataset = s.post_json(
            "/api/v1/datasets",
            {"workspace": account.slug, "name": "Probe images", "classes": ["thing"]},
        )
        if dataset.status != 201:
            self.note(f"{account.email}: creating a dataset answered {dataset.status}")
            return
        d = json.loads(dataset.body)["id"]
        dw = f"{w}/datasets/{d}"
        account.pages += [f"{dw}/", f"{dw}/images/", f"{dw}/versions/", f"{dw}/export/yolo/"]
        account.api += [f"/api/v1/datasets/{d}", f"/api/v1/datasets/{d}/versions"]
        account.api.append(f"/api/v1/datasets/{d}/export")
        upload = s.post_file(f"/api/v1/datasets/{d}/uploads", "probe.png", tiny_png())
        if upload.status != 201:
            self.note(f"{account.email}: the upload answered {upload.status}")
            return
        imp = json.loads(upload.body)["import_id"]
        account.pages.append(f"{w}/imports/{imp}/")
        account.api.append(f"/api/v1/imports/{imp}")
        account.files.append(f"uploads/{imp}/0/0")
        if self._import_finished(s, imp) != "succeeded":
            self.note(
                f"{account.email}: the import did not succeed in {self.args.wait:g}s "
                "(is a worker running?); image checks skipped"
            )
            return
        gallery = s.get(f"{dw}/images/").body.decode(errors="replace")
        images = sorted(set(re.findall(rf"{re.escape(dw)}/images/(\d+)/", gallery)))
        for i in images[:1]:
            account.pages += [f"{dw}/images/{i}/", f"{dw}/images/{i}/file/"]
            account.pages.append(f"{dw}/images/{i}/thumb/")
            account.api.append(f"/api/v1/images/{i}/labels")
            # Explore's routes serve public datasets only: this one is private.
            account.pages.append(f"/explore/datasets/{d}/images/{i}/file/")
            served = s.get(f"{dw}/images/{i}/file/")
            if served.status == 200:
                sha = hashlib.sha256(served.body).hexdigest()
                account.files += [f"blobs/{sha[:2]}/{sha}", f"thumbs/{sha[:2]}/{sha}.jpg"]
        version = s.post_json(f"/api/v1/datasets/{d}/versions", {"note": "probe"})
        if version.status == 201:
            n = json.loads(version.body)["number"]
            account.pages += [f"{dw}/versions/{n}/", f"{dw}/versions/{n}/export/coco/"]
        else:
            self.note(f"{account.email}: creating a version answered {version.status}")

    def _import_finished(self, s: Session, imp: int) -> str:
        deadline = time.monotonic() + self.args.wait
        while time.monotonic() < deadline:
            answer = s.get(f"/api/v1/imports/{imp}")
            status = json.loads(answer.body).get("status", "") if answer.status == 200 else ""
            if status in ("succeeded", "failed"):
                return status
            time.sleep(0.5)
        return "unfinished"

    # --- the attempts -----------------------------------------------------------------------

    def attempt(self, victim: Account, other: Account | None) -> list[Row]:
        callers = {"owner": victim.session, "anonymous": self.session()}
        if other is not None:
            callers["other"] = other.session
            if other.key_session is not None:
                callers["other's key"] = other.key_session
        rows = []
        explore = "/explore/"
        for kind, paths in (("page", victim.pages), ("api", victim.api)):
            for path in paths:
                results = {}
                for who, s in callers.items():
                    if who == "other's key" and kind != "api":
                        continue
                    results[who] = s.get(path)
                owner = results.pop("owner")
                private_explore = path.startswith(explore)
                checked = private_explore or owner.status == 200
                held = all(_held(kind, who, a) for who, a in results.items())
                if private_explore:
                    held = held and owner.status == 404
                shown = {"owner": owner.status, **{k: _shown(a) for k, a in results.items()}}
                rows.append(Row(path, kind, shown, held, checked))
        if other is not None:
            rows += self._own_slug_other_ids(victim, other)
        for key in [*victim.files, "", "blobs/", "uploads/"]:
            path = MEDIA + key
            results = {who: s.get(path) for who, s in callers.items() if who != "other's key"}
            held = all(a.status == 404 for a in results.values())
            rows.append(Row(path, "file", {k: _shown(a) for k, a in results.items()}, held, True))
        return rows

    def _own_slug_other_ids(self, victim: Account, other: Account) -> list[Row]:
        """The victim's object ids under the other account's own workspace slug: the lookup
        must be scoped to that workspace, not merely to a workspace the caller belongs to."""
        rows = []
        mine, theirs = f"/w/{victim.slug}/", f"/w/{other.slug}/"
        for path in victim.pages:
            if path.startswith(mine) and re.search(r"/\d+/", path):
                moved = theirs + path[len(mine) :]
                answer = other.session.get(moved)
                rows.append(
                    Row(moved, "page", {"other": _shown(answer)}, answer.status == 404, True)
                )
        return rows


def _held(kind: str, who: str, answer: Answer) -> bool:
    if who == "anonymous":
        if kind == "api":
            return answer.status in (401, 404)
        return answer.status == 404 or (
            answer.status == 302 and urllib.parse.urlsplit(answer.location).path == LOGIN
        )
    return answer.status == 404  # another account, by session or key: as if it did not exist


def _shown(answer: Answer) -> str:
    if answer.status in (301, 302, 303, 307, 308):
        return f"{answer.status}→{urllib.parse.urlsplit(answer.location).path}"
    return str(answer.status)


def print_table(rows: list[Row], out=sys.stdout) -> None:
    callers = ["owner", "other", "other's key", "anonymous"]
    widths = [max([len("what")] + [len(r.what) for r in rows]), 5, *[22] * len(callers), 7]
    head = ["what", "kind", *callers, "verdict"]
    print("  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)), file=out)
    for r in rows:
        verdict = "held" if r.held and r.checked else ("LEAKED" if not r.held else "unchecked")
        cells = [r.what, r.kind, *[str(r.results.get(c, "-")) for c in callers], verdict]
        print("  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)), file=out)


def _loopback(base: str) -> bool:
    host = urllib.parse.urlsplit(base).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base_url", help="e.g. http://127.0.0.1:8000")
    parser.add_argument("--read-mail", metavar="PATH", help="console log file or mail folder")
    parser.add_argument("--wait", type=float, default=30, help="seconds for the import")
    parser.add_argument("--max-requests", type=int, default=600)
    parser.add_argument("--time-limit", type=float, default=180, help="seconds, all in all")
    parser.add_argument("--timeout", type=float, default=10, help="seconds per request")
    parser.add_argument("--allow-remote", action="store_true", help="probe a non-loopback host")
    args = parser.parse_args(argv)
    base = args.base_url.rstrip("/")
    if urllib.parse.urlsplit(base).scheme not in ("http", "https"):
        parser.error(f"{base} is not an http(s) URL")
    if not _loopback(base) and not args.allow_remote:
        parser.error(f"{base} is not on loopback; pass --allow-remote if it is your own server")
    probe = Probe(base, args)
    rows: list[Row] = []
    run = secrets.token_hex(4)
    try:
        a, b = probe.sign_up("a", run), probe.sign_up("b", run)
        accounts = [x for x in (a, b) if x is not None]
        for account in accounts:
            probe.furnish(account)
        if a is not None:
            rows += probe.attempt(a, b)
        if b is not None:
            rows += probe.attempt(b, a)
        if len(accounts) < 2:
            probe.note("fewer than two accounts: cross-workspace attempts skipped")
    except OutOfBudget as e:
        probe.note(f"stopped early: {e}")
    print_table(rows)
    for text in probe.notes:
        print(f"note: {text}")
    leaks = [r for r in rows if not r.held]
    unchecked = [r for r in rows if r.held and not r.checked]
    if unchecked:
        probe.incomplete = True
    print(
        f"{len(rows)} checks: {len(rows) - len(leaks) - len(unchecked)} held, "
        f"{len(leaks)} leaked, {len(unchecked)} unchecked; "
        f"{args.max_requests - probe.budget.left} requests"
    )
    if leaks:
        return 1
    return 2 if probe.incomplete or not rows else 0


if __name__ == "__main__":
    sys.exit(main())
