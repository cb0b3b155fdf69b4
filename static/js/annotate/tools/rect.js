// The tools that start by dragging out a rectangle: box, oriented box and smart polygon. The
// keypoints tool (keypoints.js) starts the same way.

import { boxFromCorners, isDegenerate } from "../shapes.js";
import { Base, CLICK_PX } from "./base.js";

/** Drag out a rectangle; what it becomes is up to the subclass (`done`). */
export class RectTool extends Base {
  down(p) {
    if (p.event.altKey && (this.grabHandle(p) || this.insertOnEdge(p))) return "handled";
    if (this.grabHandle(p)) return "handled";
    if (!this.ed.canEdit) return "pan";
    this.rect = { x0: this.clampX(p.x), y0: this.clampY(p.y), x1: this.clampX(p.x), y1: this.clampY(p.y), sx0: p.sx, sy0: p.sy };
    return "handled";
  }

  move(p) {
    this.pointer = p;
    if (this.drag) this.dragTo(p);
    else if (this.rect) {
      this.rect.x1 = this.clampX(p.x);
      this.rect.y1 = this.clampY(p.y);
    }
  }

  up(p) {
    if (this.drag) {
      this.endDrag();
      return;
    }
    const r = this.rect;
    this.rect = null;
    if (!r) return;
    const ed = this.ed;
    const box = boxFromCorners(r.x0, r.y0, r.x1, r.y1, ed.width, ed.height);
    const clicked = Math.hypot(p.sx - r.sx0, p.sy - r.sy0) <= CLICK_PX;
    if (clicked || isDegenerate({ kind: "box", data: box }, ed.width, ed.height, this.view.scale)) {
      this.pickAt(p);
      return;
    }
    this.done(box, r);
  }

  cancel() {
    this.rect = null;
    this.drag = null;
  }

  key(event) {
    if (event.key === "Escape" && this.rect) {
      this.rect = null;
      return true;
    }
    return false;
  }

  draw(ctx, view) {
    const p = this.pointer;
    if (p && !this.drag && this.ed.canEdit) {
      // Crosshair lines help line the edges up with the object.
      ctx.beginPath();
      ctx.moveTo(p.sx, 0);
      ctx.lineTo(p.sx, view.cssHeight);
      ctx.moveTo(0, p.sy);
      ctx.lineTo(view.cssWidth, p.sy);
      ctx.lineWidth = 1;
      ctx.strokeStyle = "rgba(255,255,255,.35)";
      ctx.stroke();
    }
    const r = this.rect;
    if (!r) return;
    ctx.beginPath();
    ctx.rect(view.toScreenX(Math.min(r.x0, r.x1)), view.toScreenY(Math.min(r.y0, r.y1)),
      Math.abs(r.x1 - r.x0) * view.scale, Math.abs(r.y1 - r.y0) * view.scale);
    ctx.lineWidth = 2;
    ctx.strokeStyle = this.rectColor();
    ctx.setLineDash(this.dashed ? [5, 4] : []);
    ctx.stroke();
    ctx.setLineDash([]);
  }

  rectColor() {
    return this.ed.colorOf(this.ed.classId);
  }

  leave() {
    this.pointer = null;
  }
}

export class BoxTool extends RectTool {
  get name() {
    return "box";
  }

  hint() {
    return "Drag to draw a box. Drag a handle of the selected box to resize it.";
  }

  done(box) {
    this.ed.add({ kind: "box", class_id: this.ed.classId, data: box });
  }
}

export class ObbTool extends RectTool {
  get name() {
    return "obb";
  }

  hint() {
    return "Drag to draw a box, then turn it with the round handle; drag corners to resize.";
  }

  done(box, r) {
    const { width: w, height: h } = this.ed;
    const x0 = Math.min(r.x0, r.x1) / w, x1 = Math.max(r.x0, r.x1) / w;
    const y0 = Math.min(r.y0, r.y1) / h, y1 = Math.max(r.y0, r.y1) / h;
    this.ed.add({ kind: "obb", class_id: this.ed.classId, data: [x0, y0, x1, y0, x1, y1, x0, y1] });
  }
}

export class SmartTool extends RectTool {
  get name() {
    return "smart";
  }

  get dashed() {
    return true;
  }

  hint() {
    return "Smart polygon: drag a rough box around one object.";
  }

  done(box) {
    this.app.assist.smartPolygon(box);
  }
}
