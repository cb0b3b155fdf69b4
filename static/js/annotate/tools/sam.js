// SAM points: click the object (Shift+click the background), and Enter asks Segment Anything.

import { Base } from "./base.js";

export class SamTool extends Base {
  constructor(app) {
    super(app);
    this.points = [];
  }

  get name() {
    return "sam";
  }

  hint() {
    return "SAM: click on the object (Shift+click marks background), then Enter. Escape clears the points.";
  }

  down(p) {
    if (p.event.button !== 0) return "handled";
    this.points.push([this.clampX(p.x) / this.ed.width, this.clampY(p.y) / this.ed.height, p.event.shiftKey ? 0 : 1]);
    return "handled";
  }

  key(event) {
    if (event.key === "Enter" && this.points.length) {
      const points = this.points;
      this.points = [];
      this.app.assist.sam(points);
      return true;
    }
    if (event.key === "Escape" && this.points.length) {
      this.points = [];
      return true;
    }
    return false;
  }

  get busy() {
    return this.points.length > 0;
  }

  cancel() {
    this.points = [];
  }

  draw(ctx, view) {
    for (const [x, y, fg] of this.points) {
      ctx.beginPath();
      ctx.arc(view.toScreenX(x * this.ed.width), view.toScreenY(y * this.ed.height), 6, 0, Math.PI * 2);
      ctx.fillStyle = fg ? "#2fbf71" : "#e5484d";
      ctx.fill();
      ctx.lineWidth = 2;
      ctx.strokeStyle = "#fff";
      ctx.stroke();
    }
  }
}
