// The page around the canvas: the class list (with adding a class), the selected shape, the
// save state, messages, review actions and the navigation links. It listens to the editor and
// rewrites only the few elements that changed; there is no element per shape.

const SAVE_TEXT = { saved: "Saved", saving: "Saving…" };
const STATUS_TEXT = {
  unlabelled: "Unlabelled",
  labelled: "Labelled",
  in_review: "In review",
  approved: "Approved",
  rejected: "Rejected",
};

const $ = (root, selector) => root.querySelector(selector);

export class Panel {
  constructor(root, app) {
    this.root = root;
    this.app = app;
    this.ed = app.editor;
    this.el = {
      classList: $(root, "[data-testid=class-list]"),
      shapeCount: $(root, "[data-testid=shape-count]"),
      selectedInfo: $(root, "[data-testid=selected-shape]"),
      deleteButton: $(root, "[data-action=delete]"),
      saveState: $(root, "[data-testid=save-state]"),
      reload: $(root, "[data-testid=reload]"),
      message: $(root, "[data-testid=editor-message]"),
      errors: $(root, "[data-testid=save-errors]"),
      status: $(root, "[data-testid=review-status]"),
      comment: $(root, "[data-testid=review-comment]"),
      undo: $(root, "[data-action=undo]"),
      redo: $(root, "[data-action=redo]"),
      zoom: $(root, "[data-testid=zoom]"),
      hint: $(root, "[data-testid=hint]"),
      help: $(root, "[data-testid=help]"),
    };
    this.ed.on((what, detail) => this.update(what, detail));
    this.bindClassForm();
    this.bindReview();
    this.bindButtons();
    this.renderClasses();
    this.renderReview();
    if (!this.ed.canEdit) this.setSave("saved", "View only");
  }

  update(what, detail) {
    if (what === "labels") {
      this.renderCounts();
      this.renderSelected();
      this.renderUndo();
    } else if (what === "selection") {
      this.renderSelected();
    } else if (what === "classes") {
      this.renderCurrentClass();
    } else if (what === "save") {
      this.setSave(detail.state, detail.message, detail.details);
    } else if (what === "review") {
      this.renderReview();
    } else if (what === "message") {
      this.say(detail.text, detail.error);
    }
  }

  say(text, error = false) {
    const el = this.el.message;
    el.textContent = text || "";
    el.classList.toggle("error", Boolean(error));
    el.hidden = !text;
    clearTimeout(this.messageTimer);
    if (text && !error) this.messageTimer = setTimeout(() => (el.hidden = true), 6000);
  }

  // --- classes --------------------------------------------------------------------------------

  renderClasses() {
    const ed = this.ed;
    const list = this.el.classList;
    const counts = ed.counts();
    list.replaceChildren();
    ed.classes.forEach((c, i) => {
      const li = document.createElement("li");
      li.dataset.classId = c.id;
      if (c.id === ed.classId) li.setAttribute("aria-current", "true");
      const pick = document.createElement("button");
      pick.type = "button";
      pick.className = "class-pick";
      pick.title = `${c.name}: ${c.count_text ?? c.count} label${c.count === 1 ? "" : "s"} in the dataset when this page opened`;
      const swatch = document.createElement("span");
      swatch.className = "swatch";
      swatch.style.background = c.color;
      const key = document.createElement("kbd");
      key.textContent = i < 9 ? String(i + 1) : "";
      const name = document.createElement("span");
      name.className = "name";
      name.textContent = c.name;
      const count = document.createElement("span");
      count.className = "count";
      count.dataset.testid = "class-count";
      count.textContent = String(counts.get(c.id) || 0);
      pick.append(swatch, key, name, count);
      pick.addEventListener("click", () => ed.pickClass(c.id));
      li.append(pick);
      list.append(li);
    });
    if (!ed.classes.length) {
      const li = document.createElement("li");
      li.className = "empty";
      li.textContent = "No classes yet: add one below.";
      list.append(li);
    }
    if (ed.kind === "tag") this.renderTags();
  }

  /** The class for the next shape changed; the list is rebuilt only when a class was added. */
  renderCurrentClass() {
    const items = this.el.classList.querySelectorAll("li[data-class-id]");
    if (items.length !== this.ed.classes.length) {
      this.renderClasses();
      return;
    }
    for (const li of items) {
      if (Number(li.dataset.classId) === this.ed.classId) li.setAttribute("aria-current", "true");
      else li.removeAttribute("aria-current");
    }
  }

  renderCounts() {
    const counts = this.ed.counts();
    for (const li of this.el.classList.querySelectorAll("li[data-class-id]")) {
      li.querySelector(".count").textContent = String(counts.get(Number(li.dataset.classId)) || 0);
    }
    const shapes = this.ed.labels.length;
    this.el.shapeCount.textContent = String(shapes);
    if (this.ed.kind === "tag") this.renderTags();
  }

  /** On a classify dataset the list shows which classes the image is tagged with. */
  renderTags() {
    const tagged = new Set(this.ed.labels.filter((l) => l.kind === "tag").map((l) => l.class_id));
    for (const li of this.el.classList.querySelectorAll("li[data-class-id]")) {
      const on = tagged.has(Number(li.dataset.classId));
      li.classList.toggle("tagged", on);
      li.querySelector("button").setAttribute("aria-pressed", String(on));
    }
  }

  bindClassForm() {
    const form = $(this.root, "[data-testid=class-add]");
    if (!form) return;
    const input = form.querySelector("input");
    const error = form.querySelector(".error");
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const name = input.value.trim();
      if (!name) return;
      error.textContent = "";
      const { ok, data } = await this.app.api.post(this.ed.data.class_add_url, { name });
      if (!ok) {
        error.textContent = data.detail;
        return;
      }
      input.value = "";
      this.ed.addClass(data);
      this.say(`Class “${data.name}” added.`);
    });
  }

  // --- the selected shape, undo ---------------------------------------------------------------

  renderSelected() {
    const ed = this.ed;
    const label = ed.selected();
    const el = this.el.selectedInfo;
    if (label) {
      let text = `${ed.nameOf(label.class_id)} · ${label.kind}`;
      if (ed.selection.vertex >= 0) text += ` · point ${ed.selection.vertex + 1}`;
      if (ed.selection.point >= 0) {
        const names = ed.data.skeleton && ed.data.skeleton.names;
        const v = ed.dims === 3 ? label.data[4 + ed.selection.point * 3 + 2] : 2;
        text += ` · ${(names && names[ed.selection.point]) || `point ${ed.selection.point + 1}`} (${["not labelled", "occluded", "visible"][v] || v})`;
      }
      el.textContent = text;
    } else if (ed.selection.suggestion !== null) {
      const s = ed.suggestions().find((x) => x.id === ed.selection.suggestion);
      el.textContent = s ? `Suggestion: ${ed.nameOf(s.class_id)} ${Math.round(s.confidence * 100)}%` : "Nothing selected";
    } else {
      el.textContent = "Nothing selected";
    }
    if (this.el.deleteButton) this.el.deleteButton.disabled = !ed.canEdit || !label;
    this.app.assist.renderSelection();
  }

  renderUndo() {
    if (!this.el.undo) return;
    this.el.undo.disabled = !this.ed.canEdit || !this.ed.history.canUndo();
    this.el.redo.disabled = !this.ed.canEdit || !this.ed.history.canRedo();
  }

  // --- saving ---------------------------------------------------------------------------------

  setSave(state, message, details = []) {
    const el = this.el.saveState;
    el.dataset.state = state;
    el.textContent = SAVE_TEXT[state] && !message ? SAVE_TEXT[state] : message || SAVE_TEXT[state] || state;
    this.el.reload.hidden = state !== "conflict";
    const errors = this.el.errors;
    errors.replaceChildren();
    for (const e of details || []) {
      const li = document.createElement("li");
      li.textContent = e.index === undefined || e.index === null ? e.message : `Label ${e.index + 1}: ${e.message}`;
      errors.append(li);
    }
    errors.hidden = !errors.children.length;
    if (details && details.length && Number.isInteger(details[0].index) && details[0].index < this.ed.labels.length) {
      this.ed.select(details[0].index);
    }
  }

  // --- review ---------------------------------------------------------------------------------

  renderReview() {
    const ed = this.ed;
    const el = this.el.status;
    el.dataset.status = ed.status;
    el.textContent = STATUS_TEXT[ed.status] || ed.status;
    el.className = `badge review-${ed.status}`;
    this.el.comment.textContent = ed.reviewComment;
    this.el.comment.hidden = !ed.reviewComment;
    const button = (action) => $(this.root, `[data-review=${action}]`);
    const submit = button("submit");
    if (submit) submit.disabled = ed.status === "in_review" || ed.status === "approved";
    const approve = button("approve");
    if (approve) approve.disabled = ed.status === "approved";
  }

  bindReview() {
    const form = $(this.root, "[data-testid=reject-form]");
    for (const btn of this.root.querySelectorAll("[data-review]")) {
      btn.addEventListener("click", () => {
        const action = btn.dataset.review;
        if (action === "reject-open") {
          form.hidden = false;
          form.querySelector("textarea").focus();
        } else if (action === "reject-cancel") {
          form.hidden = true;
        } else {
          this.review(action, action === "reject" ? form.querySelector("textarea").value.trim() : "");
        }
      });
    }
  }

  async review(action, comment) {
    const ed = this.ed;
    const error = $(this.root, "[data-testid=review-error]");
    error.textContent = "";
    if (action === "reject" && !comment) {
      error.textContent = "Say what needs fixing.";
      return;
    }
    if (ed.canEdit && !(await ed.saver.flush())) {
      error.textContent = "Save the labels first (see the save state above).";
      return;
    }
    const { ok, data } = await this.app.api.post(ed.data.review_url, { action, comment });
    if (!ok) {
      error.textContent = data.detail;
      return;
    }
    ed.setReview(data.status, data.review_comment);
    const form = $(this.root, "[data-testid=reject-form]");
    if (form) form.hidden = true;
    const nav = ed.data.nav;
    if ((action === "approve" || action === "reject") && nav.queue === "review") {
      if (nav.next) this.app.go(nav.next);
      else this.say("That was the last image waiting for review.");
    }
  }

  // --- buttons and help -----------------------------------------------------------------------

  bindButtons() {
    for (const btn of this.root.querySelectorAll("[data-action]")) {
      btn.addEventListener("click", () => this.app.action(btn.dataset.action));
    }
    for (const btn of this.root.querySelectorAll("[data-tool]")) {
      btn.addEventListener("click", () => this.app.setTool(btn.dataset.tool));
    }
    for (const link of this.root.querySelectorAll("a[data-nav]")) {
      link.addEventListener("click", (event) => {
        if (event.ctrlKey || event.metaKey || event.shiftKey || event.button !== 0) return;
        event.preventDefault();
        this.app.go(link.href);
      });
    }
    this.el.reload.addEventListener("click", () => {
      this.app.leaving = true;
      window.location.reload();
    });
    this.el.help.addEventListener("click", (event) => {
      if (event.target === this.el.help || event.target.closest("[data-action=help-close]")) this.toggleHelp(false);
    });
  }

  toggleHelp(open) {
    const help = this.el.help;
    help.hidden = open === undefined ? !help.hidden : !open;
    if (!help.hidden) help.querySelector("[data-action=help-close]").focus();
  }

  get helpOpen() {
    return !this.el.help.hidden;
  }

  renderTool(name) {
    for (const btn of this.root.querySelectorAll("[data-tool]")) {
      btn.setAttribute("aria-pressed", String(btn.dataset.tool === name));
    }
  }

  renderZoom(scale) {
    if (this.el.zoom) this.el.zoom.textContent = `${Math.round(scale * 100)}%`;
  }

  setHint(text) {
    this.el.hint.textContent = text;
  }
}
