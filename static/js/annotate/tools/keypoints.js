// Keypoints: drag the object's box, then place its points one by one in the skeleton's order.

import { keypointSet, keypointsEmpty } from "../shapes.js";
import { RectTool } from "./rect.js";

export class KeypointsTool extends RectTool {
  constructor(app) {
    super(app);
    this.placing = -1;
    this.next = 0;
  }

  get name() {
    return "keypoints";
  }

  pointName(i) {
    const names = this.ed.data.skeleton && this.ed.data.skeleton.names;
    return (names && names[i]) || `point ${i + 1}`;
  }

  hint() {
    if (this.placing >= 0) {
      return `Click to place ${this.pointName(this.next)} (${this.next + 1} of ${this.ed.pointCount}). Right-click skips it, Enter finishes.`;
    }
    return "Drag the person's box, then place the points in order. V or right-click on a point cycles visible / occluded / not labelled.";
  }

  down(p) {
    if (this.placing >= 0) {
      if (p.event.button !== 0) return "handled";
      const ed = this.ed;
      if (this.placing !== ed.selection.index) {
        this.finish();
        return super.down(p);
      }
      const label = ed.labels[this.placing];
      label.data = keypointSet(label.data, this.next, this.clampX(p.x), this.clampY(p.y), ed.width, ed.height, ed.dims);
      ed.commit();
      this.advance();
      return "handled";
    }
    return super.down(p);
  }

  advance() {
    this.next += 1;
    if (this.next >= this.ed.pointCount) this.finish();
    this.app.refreshHint();
  }

  finish() {
    this.placing = -1;
    this.next = 0;
    this.app.refreshHint();
  }

  contextmenu(p) {
    if (this.placing >= 0) {
      this.advance();
      return true;
    }
    return this.cycleAt(p);
  }

  done(box) {
    const ed = this.ed;
    this.placing = ed.add({ kind: "keypoints", class_id: ed.classId, data: keypointsEmpty(box, ed.pointCount, ed.dims) });
    this.next = 0;
    this.app.refreshHint();
  }

  key(event) {
    if (this.placing >= 0 && (event.key === "Enter" || event.key === "Escape")) {
      this.finish();
      return true;
    }
    return super.key(event);
  }

  cancel() {
    super.cancel();
    this.finish();
  }
}
