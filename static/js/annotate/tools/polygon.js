// Polygon: click the outline point by point; edit vertices of the selected one.

import { isDegenerate } from "../shapes.js";
import { Base } from "./base.js";

const CLOSE_PX = 9;

export class PolygonTool extends Base {
  constructor(app) {
    super(app);
    this.points = [];
    this.pointer = null;
  }

  get name() {
    return "polygon";
  }

  hint() {
    if (this.points.length) {
      return "Click to add points; click the first point or press Enter to close. Backspace removes the last point, Escape cancels.";
    }
    return "Click to start a polygon. Drag vertices of the selected one; double-click or Alt+click an edge adds a vertex, Alt+click a vertex deletes it.";
  }

  down(p) {
    const ed = this.ed;
    if (!this.points.length) {
      if (p.event.altKey && (this.grabHandle(p) || this.insertOnEdge(p))) return "handled";
      if (this.grabHandle(p)) return "handled";
      if (!ed.canEdit) return "pan";
    }
    const x = this.clampX(p.x);
    const y = this.clampY(p.y);
    if (this.points.length >= 3) {
      const [fx, fy] = this.points[0];
      if (Math.hypot(this.view.toScreenX(fx) - p.sx, this.view.toScreenY(fy) - p.sy) <= CLOSE_PX) {
        this.close();
        return "handled";
      }
    }
    const last = this.points[this.points.length - 1];
    // A double-click lands two clicks on one spot: keep one point.
    if (!last || Math.hypot(this.view.toScreenX(last[0]) - p.sx, this.view.toScreenY(last[1]) - p.sy) > 2) {
      this.points.push([x, y]);
    }
    this.app.refreshHint();
    return "handled";
  }

  move(p) {
    this.pointer = p;
    if (this.drag) this.dragTo(p);
  }

  up() {
    if (this.drag) this.endDrag();
  }

  dblclick(p) {
    if (!this.points.length) this.insertOnEdge(p);
  }

  close() {
    const ed = this.ed;
    const data = [];
    for (const [x, y] of this.points) data.push(x / ed.width, y / ed.height);
    this.points = [];
    const label = { kind: "polygon", class_id: ed.classId, data };
    if (isDegenerate(label, ed.width, ed.height, this.view.scale)) {
      ed.emit("message", { text: "A polygon needs at least three points around some area." });
    } else {
      ed.add(label);
    }
    this.app.refreshHint();
  }

  key(event) {
    if (!this.points.length) return false;
    if (event.key === "Enter") {
      this.close();
      return true;
    }
    if (event.key === "Escape") {
      this.cancel();
      return true;
    }
    if (event.key === "Backspace" || event.key === "Delete") {
      this.points.pop();
      this.app.refreshHint();
      return true;
    }
    return false;
  }

  cancel() {
    this.points = [];
    this.drag = null;
    this.app.refreshHint();
  }

  get busy() {
    return this.points.length > 0;
  }

  draw(ctx, view) {
    const pts = this.points;
    if (!pts.length) return;
    const color = this.ed.colorOf(this.ed.classId);
    ctx.beginPath();
    ctx.moveTo(view.toScreenX(pts[0][0]), view.toScreenY(pts[0][1]));
    for (let i = 1; i < pts.length; i++) ctx.lineTo(view.toScreenX(pts[i][0]), view.toScreenY(pts[i][1]));
    if (this.pointer) ctx.lineTo(this.pointer.sx, this.pointer.sy);
    ctx.lineWidth = 2;
    ctx.strokeStyle = color;
    ctx.stroke();
    for (let i = 0; i < pts.length; i++) {
      ctx.beginPath();
      ctx.arc(view.toScreenX(pts[i][0]), view.toScreenY(pts[i][1]), i === 0 ? 6 : 4, 0, Math.PI * 2);
      ctx.fillStyle = i === 0 ? "#fff" : color;
      ctx.fill();
      ctx.lineWidth = 1.5;
      ctx.strokeStyle = "#111";
      ctx.stroke();
    }
  }

  leave() {
    this.pointer = null;
  }
}
