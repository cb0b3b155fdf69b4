// The editor's state and every change to it: the label list, the selection, the class for the
// next shape, model suggestions, undo/redo, the clipboard, and autosave. The page (panel.js),
// the canvas (view.js) and the tools (tools/) go through this; none keeps state of its own
// about labels.

import { History } from "./history.js";
import { Saver } from "./io.js";
import { cloneLabel, cloneLabels, keypointCycle, keypointDims, vertexDelete } from "./shapes.js";

const TASK_KIND = { detect: "box", segment: "polygon", pose: "keypoints", obb: "obb", classify: "tag" };

export class Editor {
  constructor(data, api) {
    this.data = data;
    this.api = api;
    this.width = data.image.width;
    this.height = data.image.height;
    this.task = data.dataset.task;
    this.kind = TASK_KIND[this.task] || "box";
    this.dims = keypointDims(data.dataset.keypoint_shape);
    this.pointCount = (data.dataset.keypoint_shape && data.dataset.keypoint_shape[0]) || (data.skeleton ? data.skeleton.names.length : 17);
    this.canEdit = Boolean(data.can_edit);
    this.classes = data.classes.slice().sort((a, b) => a.index - b.index);
    this.classId = this.classes.length ? this.classes[0].id : null;
    this.labels = [];
    this.decided = {};
    this.serverSuggestions = [];
    this.status = "unlabelled";
    this.reviewComment = "";
    this.loaded = false;
    this.selection = { index: -1, vertex: -1, point: -1, suggestion: null };
    this.hover = -1;
    this.history = new History({ labels: [], decided: {} });
    this.listeners = new Set();
    this.version = 0;
    this.cache = { version: -1, groups: new Map(), suggestions: [] };
    this.saver = new Saver({
      api,
      url: data.labels_url,
      revision: 0,
      payload: () => this.payload(),
      onState: (state, message, details) => this.emit("save", { state, message, details }),
      onSaved: (answer, current) => this.adoptSaved(answer, current),
    });
  }

  // --- events -------------------------------------------------------------------------------

  /** fn(what, detail): what is "labels", "selection", "classes", "save", "review", "message". */
  on(fn) {
    this.listeners.add(fn);
  }

  emit(what, detail) {
    for (const fn of this.listeners) fn(what, detail);
  }

  changed(what = "labels") {
    this.version += 1;
    this.emit(what);
  }

  // --- loading and saving ---------------------------------------------------------------------

  async load() {
    const { ok, data } = await this.api.get(this.data.labels_url);
    if (!ok) {
      this.emit("message", { text: `Could not load the labels: ${data.detail}`, error: true });
      return false;
    }
    this.adopt(data);
    this.history = new History({ labels: this.labels, decided: this.decided });
    this.loaded = true;
    this.changed();
    return true;
  }

  adopt(answer) {
    this.saver.revision = answer.revision;
    this.labels = cloneLabels(answer.labels || []);
    this.serverSuggestions = answer.suggestions || [];
    this.setReview(answer.status, answer.review_comment);
  }

  adoptSaved(answer, current) {
    this.serverSuggestions = answer.suggestions || [];
    if (current) {
      // The labels as stored (clipped, rounded): they are what the next save starts from.
      this.labels = cloneLabels(answer.labels || []);
      this.history.replace({ labels: this.labels, decided: this.decided });
      if (this.selection.index >= this.labels.length) this.selectNone();
    }
    this.setReview(answer.status, answer.review_comment);
    this.changed();
  }

  setReview(status, comment) {
    if (status === undefined) return;
    this.status = status;
    this.reviewComment = comment || "";
    this.emit("review");
  }

  payload() {
    const pending = new Set(this.serverSuggestions.map((s) => s.id));
    const accepted = [];
    const rejected = [];
    for (const [id, what] of Object.entries(this.decided)) {
      const key = Number.isNaN(Number(id)) ? id : Number(id);
      if (!pending.has(key)) continue;
      (what === "accepted" ? accepted : rejected).push(key);
    }
    return { labels: cloneLabels(this.labels), accepted_suggestions: accepted, rejected_suggestions: rejected };
  }

  // --- reading --------------------------------------------------------------------------------

  classById(id) {
    return this.classes.find((c) => c.id === id) || null;
  }

  colorOf(id) {
    const c = this.classById(id);
    return c ? c.color : "#e0e0e0";
  }

  nameOf(id) {
    const c = this.classById(id);
    return c ? c.name : "?";
  }

  refreshCache() {
    if (this.cache.version === this.version) return;
    const groups = new Map();
    for (let i = 0; i < this.labels.length; i++) {
      const label = this.labels[i];
      if (label.kind === "tag") continue;
      if (!groups.has(label.class_id)) groups.set(label.class_id, []);
      groups.get(label.class_id).push(i);
    }
    this.cache = {
      version: this.version,
      groups,
      suggestions: this.serverSuggestions.filter((s) => !this.decided[s.id]),
    };
  }

  groups() {
    this.refreshCache();
    return this.cache.groups;
  }

  suggestions() {
    this.refreshCache();
    return this.cache.suggestions;
  }

  selected() {
    const i = this.selection.index;
    return i >= 0 && i < this.labels.length ? this.labels[i] : null;
  }

  counts() {
    const out = new Map();
    for (const label of this.labels) out.set(label.class_id, (out.get(label.class_id) || 0) + 1);
    return out;
  }

  // --- changing labels ----------------------------------------------------------------------

  /** Records the labels as they are now: one undo step, and an autosave. */
  commit() {
    if (!this.canEdit) return;
    this.history.push({ labels: this.labels, decided: this.decided });
    this.saver.schedule();
    this.changed();
  }

  /** Shows an edit in progress (a drag) without recording it. */
  preview(index, data) {
    this.labels[index].data = data;
    this.changed("preview");
  }

  add(label) {
    if (!this.canEdit) return -1;
    this.labels.push(cloneLabel(label));
    const index = this.labels.length - 1;
    this.selection = { index, vertex: -1, point: -1, suggestion: null };
    this.commit();
    this.emit("selection");
    return index;
  }

  restore(snapshot) {
    if (!snapshot) return;
    this.labels = snapshot.labels;
    this.decided = snapshot.decided;
    if (this.selection.index >= this.labels.length) this.selectNone();
    this.saver.schedule();
    this.changed();
    this.emit("selection");
  }

  undo() {
    if (this.canEdit) this.restore(this.history.undo());
  }

  redo() {
    if (this.canEdit) this.restore(this.history.redo());
  }

  deleteSelected() {
    const sel = this.selection;
    const label = this.selected();
    if (!this.canEdit) return;
    if (!label) {
      if (sel.suggestion !== null) this.decide(sel.suggestion, "rejected");
      return;
    }
    if (label.kind === "polygon" && sel.vertex >= 0) {
      const data = vertexDelete(label.data, sel.vertex);
      if (data) {
        label.data = data;
        sel.vertex = -1;
        this.commit();
        return;
      }
      this.emit("message", { text: "A polygon needs at least three points; delete the whole shape instead (Delete again)." });
      sel.vertex = -1;
      this.emit("selection");
      return;
    }
    if (label.kind === "keypoints" && sel.point >= 0) {
      const o = 4 + sel.point * this.dims;
      label.data = label.data.slice();
      for (let k = 0; k < this.dims; k++) label.data[o + k] = 0;
      sel.point = -1;
      this.commit();
      return;
    }
    this.labels.splice(sel.index, 1);
    this.selectNone();
    this.commit();
  }

  /** Keys 1–9 and the class list: the class for the next shape, and for the selected one. */
  pickClass(classId) {
    if (!this.classById(classId)) return;
    this.classId = classId;
    if (this.kind === "tag") {
      this.toggleTag(classId);
    } else {
      const label = this.selected();
      if (label && this.canEdit && label.class_id !== classId) {
        label.class_id = classId;
        this.commit();
      }
    }
    this.emit("classes");
  }

  toggleTag(classId) {
    if (!this.canEdit) return;
    const at = this.labels.findIndex((l) => l.kind === "tag" && l.class_id === classId);
    if (at >= 0) this.labels.splice(at, 1);
    else this.labels.push({ kind: "tag", class_id: classId, data: [] });
    this.commit();
  }

  cycleVisibility() {
    const label = this.selected();
    if (!label || label.kind !== "keypoints" || this.selection.point < 0 || !this.canEdit || this.dims !== 3) return false;
    label.data = keypointCycle(label.data, this.selection.point, this.dims);
    this.commit();
    return true;
  }

  addClass(cls) {
    this.classes.push({ count: 0, ...cls });
    this.classes.sort((a, b) => a.index - b.index);
    this.classId = cls.id;
    this.emit("classes");
  }

  // --- selection ----------------------------------------------------------------------------

  select(index, extra = {}) {
    this.selection = { index, vertex: -1, point: -1, suggestion: null, ...extra };
    const label = this.selected();
    if (label && label.kind !== "tag") this.classId = label.class_id;
    this.emit("selection");
    this.emit("classes");
  }

  selectNone() {
    this.selection = { index: -1, vertex: -1, point: -1, suggestion: null };
    this.emit("selection");
  }

  selectSuggestion(id) {
    this.selection = { index: -1, vertex: -1, point: -1, suggestion: id };
    this.emit("selection");
  }

  // --- suggestions ----------------------------------------------------------------------------

  decide(id, what) {
    if (!this.canEdit) return;
    const s = this.serverSuggestions.find((x) => x.id === id);
    if (!s || this.decided[id]) return;
    this.decided = { ...this.decided, [id]: what };
    if (what === "accepted") {
      this.labels.push({ kind: s.kind, class_id: s.class_id, data: s.data.slice() });
      this.selection = { index: this.labels.length - 1, vertex: -1, point: -1, suggestion: null };
    } else if (this.selection.suggestion === id) {
      this.selection = { index: -1, vertex: -1, point: -1, suggestion: null };
    }
    this.commit();
    this.emit("selection");
  }

  /** Accepts every shown suggestion at or above the threshold; one undo step for all. */
  acceptAbove(threshold) {
    if (!this.canEdit) return 0;
    const chosen = this.suggestions().filter((s) => s.confidence >= threshold);
    if (!chosen.length) return 0;
    const decided = { ...this.decided };
    for (const s of chosen) {
      decided[s.id] = "accepted";
      this.labels.push({ kind: s.kind, class_id: s.class_id, data: s.data.slice() });
    }
    this.decided = decided;
    this.selectNone();
    this.commit();
    return chosen.length;
  }

  /** The server's list of suggestions waiting on this image (after running a model). */
  setSuggestions(list) {
    this.serverSuggestions = list;
    this.changed();
  }

  // --- clipboard ----------------------------------------------------------------------------

  clipboardKey() {
    return `kestrel.annotate.clipboard.${this.data.dataset.id}`;
  }

  copy() {
    const label = this.selected();
    const chosen = label ? [label] : this.labels;
    const shapes = chosen.filter((l) => l.kind !== "tag" || this.kind === "tag");
    sessionStorage.setItem(this.clipboardKey(), JSON.stringify(cloneLabels(shapes)));
    return shapes.length;
  }

  paste() {
    if (!this.canEdit) return 0;
    let shapes;
    try {
      shapes = JSON.parse(sessionStorage.getItem(this.clipboardKey()) || "[]");
    } catch {
      shapes = [];
    }
    shapes = shapes.filter((l) => this.classById(l.class_id) && Array.isArray(l.data));
    if (!shapes.length) return 0;
    for (const l of shapes) {
      if (l.kind === "tag" && this.labels.some((x) => x.kind === "tag" && x.class_id === l.class_id)) continue;
      this.labels.push(cloneLabel(l));
    }
    this.selectNone();
    this.commit();
    return shapes.length;
  }
}
