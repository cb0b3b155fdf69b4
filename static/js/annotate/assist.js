// Model-assisted labelling: a trained model's suggestions (ask, accept, reject, accept all above
// a threshold), smart polygon from a rough box, and SAM from clicked points. The server does the
// inference; this side asks, shows progress, and turns answers into ordinary labels.

import { polygonBounds } from "./shapes.js";

const LIST_LIMIT = 100;
const $ = (root, selector) => root.querySelector(selector);

export class Assist {
  constructor(root, app) {
    this.root = root;
    this.app = app;
    this.ed = app.editor;
    this.el = {
      model: $(root, "[data-testid=model-picker]"),
      suggest: $(root, "[data-testid=suggest]"),
      progress: $(root, "[data-testid=assist-progress]"),
      message: $(root, "[data-testid=assist-message]"),
      count: $(root, "[data-testid=suggestion-count]"),
      list: $(root, "[data-testid=suggestion-list]"),
      threshold: $(root, "[data-testid=threshold]"),
      thresholdValue: $(root, "[data-testid=threshold-value]"),
      acceptAbove: $(root, "[data-testid=accept-above]"),
      accept: $(root, "[data-testid=accept-suggestion]"),
      reject: $(root, "[data-testid=reject-suggestion]"),
      sam: $(root, "[data-testid=sam]"),
    };
    this.busy = false;
    this.ed.on((what) => {
      if (what === "labels") this.renderSuggestions();
    });
    this.bind();
  }

  bind() {
    const { el, ed } = this;
    el.suggest?.addEventListener("click", () => this.suggest());
    el.threshold?.addEventListener("input", () => this.renderThreshold());
    el.acceptAbove?.addEventListener("click", () => {
      const n = ed.acceptAbove(Number(el.threshold.value));
      this.say(n ? `Accepted ${n} suggestion${n === 1 ? "" : "s"}.` : "No suggestion is that confident.");
    });
    el.accept?.addEventListener("click", () => this.acceptSelected());
    el.reject?.addEventListener("click", () => this.rejectSelected());
    if (el.sam) {
      const sam = ed.data.sam || { available: false, message: "SAM is not set up on this server." };
      el.sam.title = sam.available ? "Segment anything: click points on the object (M)" : sam.message;
      // Still clickable when SAM is missing: the click says what an admin has to set up.
      el.sam.classList.toggle("unavailable", !sam.available);
      el.sam.addEventListener("click", () => this.samTool());
    }
    this.renderThreshold();
  }

  say(text, error = false) {
    const el = this.el.message;
    if (!el) return;
    el.textContent = text;
    el.hidden = !text;
    el.classList.toggle("error", error);
  }

  setBusy(text) {
    this.busy = Boolean(text);
    if (this.el.progress) {
      this.el.progress.hidden = !text;
      this.el.progress.querySelector("span").textContent = text || "";
    }
    if (this.el.suggest) this.el.suggest.disabled = this.busy;
  }

  renderThreshold() {
    if (!this.el.threshold) return;
    const t = Number(this.el.threshold.value);
    this.el.thresholdValue.textContent = t.toFixed(2);
    const n = this.ed.suggestions().filter((s) => s.confidence >= t).length;
    this.el.acceptAbove.textContent = `Accept all ≥ ${t.toFixed(2)} (${n})`;
    this.el.acceptAbove.disabled = !n || !this.ed.canEdit;
  }

  renderSuggestions() {
    const ed = this.ed;
    const shown = ed.suggestions();
    if (this.el.count) this.el.count.textContent = String(shown.length);
    const list = this.el.list;
    if (!list) return;
    list.replaceChildren();
    const sorted = shown.slice().sort((a, b) => b.confidence - a.confidence).slice(0, LIST_LIMIT);
    for (const s of sorted) {
      const li = document.createElement("li");
      li.dataset.suggestionId = s.id;
      if (s.id === ed.selection.suggestion) li.setAttribute("aria-current", "true");
      const swatch = document.createElement("span");
      swatch.className = "swatch";
      swatch.style.background = ed.colorOf(s.class_id);
      const name = document.createElement("button");
      name.type = "button";
      name.className = "link-like";
      name.textContent = `${ed.nameOf(s.class_id)} ${Math.round(s.confidence * 100)}%`;
      name.addEventListener("click", () => ed.selectSuggestion(s.id));
      li.append(swatch, name);
      if (ed.canEdit) {
        const yes = document.createElement("button");
        yes.type = "button";
        yes.className = "small";
        yes.textContent = "Accept";
        yes.dataset.testid = "suggestion-accept";
        yes.addEventListener("click", () => ed.decide(s.id, "accepted"));
        const no = document.createElement("button");
        no.type = "button";
        no.className = "small secondary";
        no.textContent = "Reject";
        no.addEventListener("click", () => ed.decide(s.id, "rejected"));
        li.append(yes, no);
      }
      list.append(li);
    }
    this.renderThreshold();
  }

  renderSelection() {
    const picked = this.ed.selection.suggestion;
    if (this.el.accept) this.el.accept.disabled = picked === null || !this.ed.canEdit;
    if (this.el.reject) this.el.reject.disabled = picked === null || !this.ed.canEdit;
    for (const li of this.el.list?.children || []) {
      if (String(picked) === li.dataset.suggestionId) li.setAttribute("aria-current", "true");
      else li.removeAttribute("aria-current");
    }
  }

  /** Enter on a selected suggestion; true when there was one. */
  acceptSelected() {
    const id = this.ed.selection.suggestion;
    if (id === null) return false;
    this.ed.decide(id, "accepted");
    return true;
  }

  rejectSelected() {
    const id = this.ed.selection.suggestion;
    if (id === null) return false;
    this.ed.decide(id, "rejected");
    return true;
  }

  async suggest() {
    const ed = this.ed;
    const modelId = this.el.model ? Number(this.el.model.value) : NaN;
    if (!modelId || this.busy) return;
    this.say("");
    this.setBusy("Running the model…");
    const { ok, data } = await this.app.api.post(ed.data.suggest_url, { model_id: modelId });
    this.setBusy("");
    if (!ok) {
      this.say(data.detail, true);
      return;
    }
    ed.setSuggestions(data.suggestions || []);
    const n = ed.suggestions().length;
    this.say(n ? `${n} suggestion${n === 1 ? "" : "s"} to review.` : "The model found nothing new on this image.");
  }

  /** A polygon answer becomes a label of the current class: a polygon, or its box on detect. */
  addOutline(polygon) {
    const ed = this.ed;
    if (!Array.isArray(polygon) || polygon.length < 6) {
      this.say("No outline found there.", true);
      return;
    }
    if (ed.kind === "box") ed.add({ kind: "box", class_id: ed.classId, data: polygonBounds(polygon) });
    else ed.add({ kind: "polygon", class_id: ed.classId, data: polygon });
    this.say("");
  }

  async smartPolygon(box) {
    const ed = this.ed;
    if (this.busy) return;
    if (ed.classId === null) {
      this.say("Add a class first.", true);
      return;
    }
    this.setBusy("Finding the outline…");
    const { ok, data } = await this.app.api.post(ed.data.smart_polygon_url, { box, class_id: ed.classId });
    this.setBusy("");
    if (!ok) this.say(data.detail, true);
    else this.addOutline(data.data);
  }

  samTool() {
    const sam = this.ed.data.sam;
    if (!sam || !sam.available) {
      this.say((sam && sam.message) || "SAM is not set up on this server.", true);
      return;
    }
    this.app.setTool("sam");
  }

  async sam(points) {
    const ed = this.ed;
    if (this.busy) return;
    this.setBusy("Segmenting…");
    const { ok, data } = await this.app.api.post(ed.data.sam.url, { points });
    this.setBusy("");
    if (!ok) this.say(data.detail, true);
    else this.addOutline(data.data);
  }
}
