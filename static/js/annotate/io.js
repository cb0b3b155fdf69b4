// Talking to the server: JSON requests with the session cookie and CSRF token, and the autosaver
// that PUTs an image's labels with their revision, one request at a time.

export class Api {
  constructor(csrfToken) {
    this.csrfToken = csrfToken;
  }

  /** {ok, status, data}; data is the JSON answer, or {detail} saying what went wrong. */
  async request(method, url, body) {
    let response;
    try {
      response = await fetch(url, {
        method,
        credentials: "same-origin",
        headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRFToken": this.csrfToken },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    } catch {
      return { ok: false, status: 0, data: { detail: "Could not reach the server. Check the connection." } };
    }
    let data = null;
    try {
      data = await response.json();
    } catch {
      data = null;
    }
    if (!data || typeof data !== "object") {
      data = response.ok ? {} : { detail: `The server answered ${response.status} ${response.statusText}.`.trim() };
    }
    if (!response.ok && !data.detail) data.detail = `The server answered ${response.status}.`;
    return { ok: response.ok, status: response.status, data };
  }

  get(url) {
    return this.request("GET", url);
  }

  post(url, body) {
    return this.request("POST", url, body);
  }

  put(url, body) {
    return this.request("PUT", url, body);
  }
}

const RETRY_MS = 3000;

/**
 * Autosave: schedule() after every change; after `delay` ms of quiet the current labels are
 * PUT. Never two PUTs in flight: changes made meanwhile are sent together once it answers.
 * A 409 (someone else saved) stops saving for good on this page: nothing is overwritten.
 *
 * onState(state, message, details): state is saved | saving | error | conflict.
 * onSaved(answer, current): the server's answer; `current` is false when the labels have
 * changed since that request was built, so its labels must not replace the newer ones.
 */
export class Saver {
  constructor({ api, url, revision, payload, onState, onSaved, delay = 400 }) {
    Object.assign(this, { api, url, revision, payload, onState, onSaved, delay });
    this.changeSeq = 0;
    this.savedSeq = 0;
    this.inFlight = false;
    this.timer = null;
    this.state = "saved";
    this.waiters = [];
  }

  get pending() {
    return this.inFlight || this.savedSeq !== this.changeSeq;
  }

  schedule() {
    if (this.state === "conflict") return;
    this.changeSeq += 1;
    this.setState("saving");
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.run(), this.delay);
  }

  /** Saves now what is waiting; resolves when nothing is (true) or saving failed (false). */
  flush() {
    clearTimeout(this.timer);
    const done = new Promise((resolve) => this.waiters.push(resolve));
    this.run();
    return done;
  }

  setState(state, message = "", details = []) {
    this.state = state;
    this.onState(state, message, details);
  }

  settle() {
    if (this.inFlight) return;
    const ok = this.savedSeq === this.changeSeq;
    if (!ok && this.state === "saving") return;
    const waiters = this.waiters;
    this.waiters = [];
    for (const resolve of waiters) resolve(ok);
  }

  async run() {
    if (this.inFlight) return;
    if (this.state === "conflict" || this.savedSeq === this.changeSeq) {
      if (this.state === "saving") this.setState("saved");
      this.settle();
      return;
    }
    const seq = this.changeSeq;
    this.inFlight = true;
    this.setState("saving");
    const { ok, status, data } = await this.api.put(this.url, { revision: this.revision, ...this.payload() });
    this.inFlight = false;
    if (ok) {
      this.revision = data.revision;
      this.savedSeq = seq;
      this.onSaved(data, seq === this.changeSeq);
      if (seq !== this.changeSeq) {
        this.run();
        return;
      }
      this.setState("saved");
    } else if (status === 409) {
      clearTimeout(this.timer);
      this.setState("conflict", data.detail || "Someone else saved this image meanwhile.");
    } else if (status === 0) {
      this.setState("error", `Not saved: ${data.detail} Trying again…`);
      clearTimeout(this.timer);
      this.timer = setTimeout(() => this.run(), RETRY_MS);
      // A navigation waiting on this save learns now that it failed; the retry goes on.
      this.resolveFailed();
      return;
    } else {
      this.setState("error", `Not saved: ${data.detail}`, data.errors || []);
    }
    this.settle();
  }

  resolveFailed() {
    const waiters = this.waiters;
    this.waiters = [];
    for (const resolve of waiters) resolve(false);
  }
}
