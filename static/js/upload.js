/* Kestrel's resumable uploader (no framework, no inline code: the page's CSP allows neither).

   The protocol, served by datasets/views/uploads.py:
   1. POST create_url {"files": [{name, size}]}  ->  {id, files, chunk_size, missing: [[file,
      chunk], ...], received_size, total_size, chunk_url, complete_url, import_url, resumed}.
      The same person sending the same file list again gets the same, unfinished upload back:
      that is how a reloaded page resumes (files are matched by name and size).
   2. PUT the raw bytes of each missing chunk to chunk_url, a few at a time. A failed chunk is
      retried with backoff; a chunk the server already has is acknowledged again.
   3. POST complete_url; the server checks every chunk is in and queues the import.
   4. Go to import_url, which shows the import's progress and then its report.
*/
(function () {
  "use strict";

  const root = document.getElementById("uploader");
  if (!root) return;
  root.hidden = false;

  const PARALLEL = 3;
  const MAX_ATTEMPTS = 8;
  const LIST_SHOWN = 200;
  const ARCHIVE = /\.(zip|tar|tgz|gz)$/i;

  const $ = (id) => document.getElementById(id);
  const dropzone = $("dropzone");
  const pickFiles = $("pick-files");
  const pickFolder = $("pick-folder");
  const selection = $("selection");
  const summary = $("selection-summary");
  const list = $("selection-list");
  const startButton = $("start-upload");
  const clearButton = $("clear-selection");
  const progressBox = $("upload-progress-box");
  const progressBar = $("upload-progress");
  const progressText = $("upload-progress-text");
  const errorBox = $("upload-error");

  const createUrl = root.dataset.createUrl;
  const maxBytes = Number(root.dataset.maxBytes);
  const maxFiles = Number(root.dataset.maxFiles);

  let chosen = []; // [{file: File, name: string}], sorted by name
  let busy = false;

  // --- helpers ---------------------------------------------------------------------------

  function csrfToken() {
    try {
      const headers = JSON.parse(document.body.getAttribute("hx-headers") || "{}");
      if (headers["X-CSRFToken"]) return headers["X-CSRFToken"];
    } catch (e) {
      /* fall back to the cookie */
    }
    const match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
    return match ? decodeURIComponent(match[1]) : "";
  }

  function formatBytes(n) {
    const units = ["bytes", "KB", "MB", "GB", "TB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) {
      n /= 1024;
      i += 1;
    }
    return i === 0 ? `${n} bytes` : `${n.toFixed(1)} ${units[i]}`;
  }

  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

  function online() {
    if (navigator.onLine !== false) return Promise.resolve();
    setText("Waiting for the network to come back…");
    return new Promise((resolve) => window.addEventListener("online", resolve, { once: true }));
  }

  function backoffMs(attempt) {
    const base = Math.min(30000, 1000 * 2 ** (attempt - 1));
    return Math.round(base * (0.75 + Math.random() * 0.5));
  }

  function showError(message) {
    errorBox.textContent = message || "";
    errorBox.hidden = !message;
  }

  function setText(message) {
    progressText.textContent = message;
  }

  class UploadError extends Error {
    constructor(message, { status = 0, fatal = true, body = {} } = {}) {
      super(message);
      this.status = status;
      this.fatal = fatal;
      this.body = body;
    }
  }

  function parseJson(text) {
    try {
      const value = JSON.parse(text);
      return value && typeof value === "object" ? value : {};
    } catch (e) {
      return {};
    }
  }

  function explain(status, body) {
    if (body.detail) return body.detail;
    if (status === 403) return "You are not allowed to upload into this dataset.";
    if (status === 404) return "This dataset or upload no longer exists.";
    return `The server answered ${status}.`;
  }

  const retryable = (status) => status === 0 || status === 408 || status === 429 || status >= 500;

  /* A JSON request (create, complete), retried while the network or server is down. */
  async function requestJson(method, url, payload) {
    for (let attempt = 1; ; attempt += 1) {
      let status = 0;
      let body = {};
      try {
        const response = await fetch(url, {
          method,
          credentials: "same-origin",
          headers: {
            "Content-Type": "application/json",
            Accept: "application/json",
            "X-CSRFToken": csrfToken(),
          },
          body: payload === undefined ? undefined : JSON.stringify(payload),
        });
        status = response.status;
        body = parseJson(await response.text());
      } catch (e) {
        status = 0;
      }
      if (status >= 200 && status < 300) return { status, body };
      if (!retryable(status) || attempt >= MAX_ATTEMPTS) {
        const message = status === 0 ? "The connection dropped; check the network and try again." : explain(status, body);
        throw new UploadError(message, { status, fatal: true, body });
      }
      await sleep(backoffMs(attempt));
      await online();
    }
  }

  /* One chunk, with upload progress (fetch has none, XMLHttpRequest has). */
  function putChunk(url, blob, onProgress) {
    return new Promise((resolve, reject) => {
      const xhr = new XMLHttpRequest();
      xhr.open("PUT", url);
      xhr.setRequestHeader("X-CSRFToken", csrfToken());
      xhr.setRequestHeader("Content-Type", "application/octet-stream");
      xhr.setRequestHeader("Accept", "application/json");
      xhr.timeout = 5 * 60 * 1000;
      xhr.upload.addEventListener("progress", (event) => onProgress(event.loaded));
      xhr.addEventListener("load", () => {
        const body = parseJson(xhr.responseText);
        if (xhr.status >= 200 && xhr.status < 300) {
          resolve(body);
        } else {
          reject(new UploadError(explain(xhr.status, body), { status: xhr.status, fatal: !retryable(xhr.status), body }));
        }
      });
      const dropped = () => reject(new UploadError("The connection dropped.", { fatal: false }));
      xhr.addEventListener("error", dropped);
      xhr.addEventListener("timeout", dropped);
      xhr.addEventListener("abort", dropped);
      xhr.send(blob);
    });
  }

  // --- choosing files --------------------------------------------------------------------

  function entryFile(entry) {
    return new Promise((resolve, reject) => entry.file(resolve, reject));
  }

  function readBatch(reader) {
    return new Promise((resolve, reject) => reader.readEntries(resolve, reject));
  }

  /* Files of dropped folders keep their path inside the folder, as an archive's would. */
  async function walk(entry, out) {
    if (entry.isFile) {
      out.push({ file: await entryFile(entry), name: entry.fullPath.replace(/^\/+/, "") });
    } else if (entry.isDirectory) {
      const reader = entry.createReader();
      for (;;) {
        const batch = await readBatch(reader);
        if (!batch.length) break;
        for (const child of batch) await walk(child, out);
      }
    }
  }

  function problemsOf(files) {
    const total = files.reduce((sum, c) => sum + c.file.size, 0);
    if (files.length > maxFiles) {
      return `One upload holds at most ${maxFiles.toLocaleString()} files; you chose ${files.length.toLocaleString()}. Put them in an archive or upload them in parts.`;
    }
    if (total > maxBytes) {
      return `These files come to ${formatBytes(total)}; your plan allows ${formatBytes(maxBytes)} in one upload. Upload them in parts.`;
    }
    if (total === 0) return "The files chosen are empty; nothing to upload.";
    if (files.length > 1 && files.some((c) => ARCHIVE.test(c.name))) {
      return "Upload an archive on its own, or images and label files without an archive.";
    }
    for (let i = 1; i < files.length; i += 1) {
      if (files[i].name === files[i - 1].name) return `“${files[i].name}” is chosen twice; choose each file once.`;
    }
    return "";
  }

  function choose(files) {
    if (busy) return;
    // A fixed order, so choosing the same files again declares the same list and resumes.
    chosen = files.slice().sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    list.replaceChildren();
    for (const c of chosen.slice(0, LIST_SHOWN)) {
      const item = document.createElement("li");
      const name = document.createElement("bdi");
      name.className = "filename";
      name.textContent = c.name;
      const size = document.createElement("span");
      size.className = "muted";
      size.textContent = formatBytes(c.file.size);
      item.append(name, " ", size);
      list.append(item);
    }
    if (chosen.length > LIST_SHOWN) {
      const more = document.createElement("li");
      more.className = "muted";
      more.textContent = `…and ${(chosen.length - LIST_SHOWN).toLocaleString()} more`;
      list.append(more);
    }
    const total = chosen.reduce((sum, c) => sum + c.file.size, 0);
    summary.textContent = `${chosen.length.toLocaleString()} file${chosen.length === 1 ? "" : "s"}, ${formatBytes(total)}`;
    selection.hidden = chosen.length === 0;
    const problem = problemsOf(chosen);
    showError(problem);
    startButton.disabled = Boolean(problem) || chosen.length === 0;
    startButton.textContent = "Upload";
    progressBox.hidden = true;
  }

  pickFiles.addEventListener("change", () => {
    choose([...pickFiles.files].map((file) => ({ file, name: file.name })));
    pickFiles.value = "";
  });
  pickFolder.addEventListener("change", () => {
    choose([...pickFolder.files].map((file) => ({ file, name: file.webkitRelativePath || file.name })));
    pickFolder.value = "";
  });
  clearButton.addEventListener("click", () => {
    choose([]);
    showError("");
  });

  // Dropping a file anywhere else on the page must not navigate away from it.
  window.addEventListener("dragover", (event) => event.preventDefault());
  window.addEventListener("drop", (event) => event.preventDefault());
  dropzone.addEventListener("dragover", (event) => {
    event.preventDefault();
    dropzone.classList.add("over");
  });
  dropzone.addEventListener("dragleave", () => dropzone.classList.remove("over"));
  dropzone.addEventListener("drop", async (event) => {
    event.preventDefault();
    dropzone.classList.remove("over");
    const items = [...(event.dataTransfer.items || [])];
    // Entries must be taken while the event lasts; reading them can wait.
    const entries = items.map((item) => (item.kind === "file" && item.webkitGetAsEntry ? item.webkitGetAsEntry() : null));
    if (entries.length && entries.every(Boolean)) {
      const out = [];
      try {
        for (const entry of entries) await walk(entry, out);
      } catch (e) {
        showError("Some dropped files could not be read; choose them with the button instead.");
        return;
      }
      choose(out);
    } else {
      choose([...event.dataTransfer.files].map((file) => ({ file, name: file.name })));
    }
  });

  // --- sending ---------------------------------------------------------------------------

  function render(state) {
    let sent = state.base + state.done;
    for (const loaded of state.inflight.values()) sent += loaded;
    sent = Math.min(sent, state.total);
    const percent = state.total ? Math.floor((sent * 100) / state.total) : 100;
    progressBar.value = percent;
    let text = `${percent}% — ${formatBytes(sent)} of ${formatBytes(state.total)} sent`;
    if (state.note) text += ` · ${state.note}`;
    setText(text);
  }

  async function sendChunkWithRetry(upload, fileIndex, chunkIndex, state) {
    const file = chosen[fileIndex].file;
    const start = chunkIndex * upload.chunk_size;
    const blob = file.slice(start, Math.min(start + upload.chunk_size, file.size));
    const url = upload.chunk_url.replace("{file}", fileIndex).replace("{chunk}", chunkIndex);
    const key = `${fileIndex}/${chunkIndex}`;
    for (let attempt = 1; ; attempt += 1) {
      if (state.failed) return;
      try {
        await putChunk(url, blob, (loaded) => {
          state.inflight.set(key, loaded);
          render(state);
        });
        state.inflight.delete(key);
        state.done += blob.size;
        state.note = "";
        render(state);
        return;
      } catch (err) {
        state.inflight.delete(key);
        if (err.fatal || attempt >= MAX_ATTEMPTS) throw err;
        const wait = backoffMs(attempt);
        state.note = `connection problem, retrying in ${Math.ceil(wait / 1000)} s`;
        render(state);
        await sleep(wait);
        await online();
      }
    }
  }

  async function sendAll(upload, missing, state) {
    const queue = missing.slice();
    const worker = async () => {
      while (queue.length && !state.failed) {
        const [fileIndex, chunkIndex] = queue.shift();
        try {
          await sendChunkWithRetry(upload, fileIndex, chunkIndex, state);
        } catch (err) {
          state.failed = state.failed || err;
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(PARALLEL, queue.length) }, worker));
    if (state.failed) throw state.failed;
  }

  async function start() {
    if (busy || !chosen.length || problemsOf(chosen)) return;
    busy = true;
    startButton.disabled = clearButton.disabled = pickFiles.disabled = pickFolder.disabled = true;
    showError("");
    progressBox.hidden = false;
    progressBar.value = 0;
    setText("Starting…");
    let upload = null;
    try {
      const declared = chosen.map((c) => ({ name: c.name, size: c.file.size }));
      const fps = document.getElementById("uploader_video_fps");
      const payload = { files: declared };
      if (fps && fps.value !== "") payload.video_fps = Number(fps.value);
      upload = (await requestJson("POST", createUrl, payload)).body;
      const same = upload.files.length === declared.length && upload.files.every((f, i) => f.name === declared[i].name && f.size === declared[i].size);
      if (!same) throw new UploadError("The server holds a different file list for this upload; start again.");
      const state = { total: upload.total_size, base: upload.received_size, done: 0, inflight: new Map(), note: "", failed: null };
      if (upload.resumed) state.note = `resuming: ${formatBytes(upload.received_size)} were already on the server`;
      render(state);
      let missing = upload.missing;
      for (let round = 1; ; round += 1) {
        await sendAll(upload, missing, state);
        try {
          const done = await requestJson("POST", upload.complete_url);
          progressBar.value = 100;
          setText(`100% — ${formatBytes(state.total)} sent. Starting the import…`);
          busy = false;
          window.location.assign(done.body.import_url);
          return;
        } catch (err) {
          // Chunks can go missing between sending and completing (another tab, a cleanup):
          // send what the server lists, twice at most, then give up with its message.
          if (err.status === 400 && Array.isArray(err.body.missing) && err.body.missing.length && round < 3) {
            missing = err.body.missing;
            state.base = state.total - missing.reduce((sum, [fi, ci]) => sum + Math.min(upload.chunk_size, chosen[fi].file.size - ci * upload.chunk_size), 0);
            state.done = 0;
            continue;
          }
          throw err;
        }
      }
    } catch (err) {
      if (err.status === 409 && upload) {
        window.location.assign(upload.import_url); // already completed, e.g. in another tab
        return;
      }
      busy = false;
      startButton.disabled = clearButton.disabled = pickFiles.disabled = pickFolder.disabled = false;
      startButton.textContent = "Try again";
      showError(`${err.message} Choose “Try again” to continue; what already arrived is kept.`);
    }
  }

  startButton.addEventListener("click", start);
  window.addEventListener("beforeunload", (event) => {
    if (!busy) return;
    event.preventDefault();
    event.returnValue = "";
  });
})();
