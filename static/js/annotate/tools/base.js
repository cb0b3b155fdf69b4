// What every tool shares. A tool gets pointer events already turned into image pixels
// ({sx, sy, x, y, event}) and keys; it changes labels only through the editor (editor.js). Every
// tool can drag the handles of the selected shape, so a box just drawn can be fixed without
// switching tools.

import {
  edgeAt, handleAt, isDegenerate, keypointSet, labelArea, labelHandles, labelHit, labelMove,
  obbResize, obbRotate, vertexDelete, vertexInsert, vertexSet, boxResize, hitTest,
} from "../shapes.js";
import { ROTATE_HANDLE_PX } from "../view.js";

const HANDLE_TOL = 7;
export const CLICK_PX = 3;

const clamp = (v, lo, hi) => (v < lo ? lo : v > hi ? hi : v);

/** Shared by the tools: what is under the pointer, and dragging handles and whole shapes. */
export class Base {
  constructor(app) {
    this.app = app;
    this.ed = app.editor;
    this.view = app.view;
    this.drag = null;
  }

  get cursor() {
    return "crosshair";
  }

  hint() {
    return "";
  }

  tol() {
    return HANDLE_TOL / this.view.scale;
  }

  clampX(x) {
    return clamp(x, 0, this.ed.width);
  }

  clampY(y) {
    return clamp(y, 0, this.ed.height);
  }

  /** Starts dragging a handle of the selected shape if one is under p. */
  grabHandle(p) {
    const ed = this.ed;
    const label = ed.selected();
    if (!label || !ed.canEdit) return false;
    const handles = labelHandles(label, ed.width, ed.height, ed.dims, ROTATE_HANDLE_PX / this.view.scale);
    const handle = handleAt(handles, p.x, p.y, this.tol());
    if (!handle) return false;
    const index = ed.selection.index;
    if (label.kind === "polygon" && handle.type === "vertex" && p.event.altKey) {
      const data = vertexDelete(label.data, handle.index);
      if (data) {
        label.data = data;
        ed.selection.vertex = -1;
        ed.commit();
      } else {
        ed.emit("message", { text: "A polygon needs at least three points." });
      }
      return true;
    }
    if (handle.type === "vertex") ed.select(index, { vertex: handle.index });
    if (handle.type === "point") ed.select(index, { point: handle.index });
    this.drag = { type: "handle", index, handle, start: label.data.slice(), moved: false };
    return true;
  }

  /** Alt+click on the selected polygon's edge inserts a vertex there. */
  insertOnEdge(p) {
    const ed = this.ed;
    const label = ed.selected();
    if (!label || label.kind !== "polygon" || !ed.canEdit) return false;
    const edge = edgeAt(label.data, p.x, p.y, this.tol(), ed.width, ed.height);
    if (edge === null) return false;
    label.data = vertexInsert(label.data, edge, this.clampX(p.x), this.clampY(p.y), ed.width, ed.height);
    ed.commit();
    ed.select(ed.selection.index, { vertex: edge + 1 });
    return true;
  }

  dragTo(p) {
    const ed = this.ed;
    const d = this.drag;
    const { width: w, height: h, dims } = ed;
    if (d.type === "move") {
      const label = ed.labels[d.index];
      ed.preview(d.index, labelMove({ kind: label.kind, data: d.start }, p.x - d.x0, p.y - d.y0, w, h, dims));
      d.moved = d.moved || Math.hypot(p.sx - d.sx0, p.sy - d.sy0) > CLICK_PX;
      return;
    }
    const hd = d.handle;
    let data = null;
    if (hd.type === "box") {
      data = d.start.slice();
      data.splice(0, 4, ...boxResize(d.start, hd.name, p.x, p.y, w, h));
    } else if (hd.type === "vertex") {
      data = vertexSet(d.start, hd.index, p.x, p.y, w, h);
    } else if (hd.type === "corner") {
      data = obbResize(d.start, hd.index, p.x, p.y, w, h);
    } else if (hd.type === "rotate") {
      data = obbRotate(d.start, p.x, p.y, w, h);
    } else if (hd.type === "point") {
      data = keypointSet(d.start, hd.index, p.x, p.y, w, h, dims);
    }
    if (data) {
      ed.preview(d.index, data);
      d.moved = true;
    }
  }

  /** Ends a drag: one undo step if something moved, and nothing left degenerate. */
  endDrag() {
    const d = this.drag;
    this.drag = null;
    if (!d || !d.moved) return d;
    const ed = this.ed;
    const label = ed.labels[d.index];
    // A drag that changed nothing (held at the image's edge) is no undo step.
    if (label.data.every((v, i) => v === d.start[i]) && label.data.length === d.start.length) return d;
    if (isDegenerate(label, ed.width, ed.height, this.view.scale)) {
      label.data = d.start;
      ed.emit("message", { text: "That would make the shape too small; it was put back." });
      ed.changed();
      return d;
    }
    ed.commit();
    return d;
  }

  /** Selects what is at p: the smallest label or suggestion there, or nothing. */
  pickAt(p) {
    const ed = this.ed;
    const tol = this.tol();
    const index = hitTest(ed.labels, p.x, p.y, tol, ed.width, ed.height);
    let best = null;
    let bestArea = index >= 0 ? labelArea(ed.labels[index], ed.width, ed.height) : Infinity;
    for (const s of ed.suggestions()) {
      if (!labelHit(s, p.x, p.y, tol, ed.width, ed.height)) continue;
      const area = labelArea(s, ed.width, ed.height);
      if (area < bestArea) {
        best = s;
        bestArea = area;
      }
    }
    if (best) ed.selectSuggestion(best.id);
    else if (index >= 0) ed.select(index);
    else ed.selectNone();
    return best ? "suggestion" : index >= 0 ? "label" : null;
  }

  down() {}
  move(p) {
    if (this.drag) this.dragTo(p);
  }
  up() {
    this.endDrag();
  }
  dblclick() {}
  contextmenu(p) {
    return this.cycleAt(p);
  }
  key() {
    return false;
  }
  cancel() {
    this.drag = null;
  }
  draw() {}

  /** Right-click on a keypoint of the selected pose cycles its visibility. */
  cycleAt(p) {
    const ed = this.ed;
    const label = ed.selected();
    if (!label || label.kind !== "keypoints") return false;
    const handles = labelHandles(label, ed.width, ed.height, ed.dims, 0).filter((hd) => hd.type === "point");
    const hd = handleAt(handles, p.x, p.y, this.tol());
    if (!hd) return false;
    ed.select(ed.selection.index, { point: hd.index });
    return ed.cycleVisibility();
  }
}
