// Select and edit: pick a shape, move it, reshape it by its handles; empty space pans.

import { Base } from "./base.js";

export class SelectTool extends Base {
  get name() {
    return "select";
  }

  get cursor() {
    return "default";
  }

  hint() {
    if (this.ed.kind === "tag") {
      return this.ed.canEdit ? "Press 1–9 or click a class to tag this image (again to untag)." : "";
    }
    return this.ed.canEdit
      ? "Click a shape to select it; drag to move it, drag its handles to reshape it. Drag empty space to pan."
      : "Click a shape to see its class. Drag to pan, wheel to zoom.";
  }

  down(p) {
    const ed = this.ed;
    if (p.event.altKey && this.grabHandle(p)) return "handled";
    if (p.event.altKey && this.insertOnEdge(p)) return "handled";
    if (this.grabHandle(p)) return "handled";
    const what = this.pickAt(p);
    if (what === "label" && ed.canEdit) {
      const label = ed.selected();
      this.drag = { type: "move", index: ed.selection.index, start: label.data.slice(), x0: p.x, y0: p.y, sx0: p.sx, sy0: p.sy, moved: false };
      return "handled";
    }
    // Dragging empty space pans.
    return what ? "handled" : "pan";
  }

  dblclick(p) {
    this.insertOnEdge(p);
  }
}
