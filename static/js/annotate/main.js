// The labelling editor's entry point: reads the page's editor data, puts the pieces together and
// routes the mouse and the keyboard. Every key is listed in the help overlay (editor.html).

import { Assist } from "./assist.js";
import { Editor } from "./editor.js";
import { Api } from "./io.js";
import { pixelEditor, viewSize } from "./masks.js";
import { Panel } from "./panel.js";
import { cloneLabel, cloneLabels, hitTest } from "./shapes.js";
import { DRAW_TOOLS, SamTool, SelectTool, SmartTool } from "./tools/index.js";
import { Renderer, View } from "./view.js";

const TOOL_KEYS = { e: "select", b: "box", p: "polygon", k: "keypoints", o: "obb", s: "smart", m: "sam" };
const WHEEL_ZOOM = 0.0015;

class App {
  constructor(root, data) {
    this.root = root;
    this.data = data;
    this.api = new Api(data.csrf_token);
    this.editor = new Editor(data, this.api);
    this.view = new View(...viewSize(data));
    this.canvas = root.querySelector("[data-testid=editor-canvas]");
    this.stage = this.canvas.parentElement;
    this.leaving = false;
    this.pan = null;
    this.pointerAt = null; // screen position of the last pointer event a tool was given
    this.spaceDown = false;
    this.fitted = false;
    this.drawTimesSeen = 0;

    const ed = this.editor;
    this.tools = { select: new SelectTool(this) };
    if (ed.canEdit && DRAW_TOOLS[ed.kind]) this.tools[ed.kind] = new DRAW_TOOLS[ed.kind](this);
    if (ed.canEdit && (ed.kind === "polygon" || ed.kind === "box")) {
      this.tools.smart = new SmartTool(this);
      if (data.sam && data.sam.available) this.tools.sam = new SamTool(this);
    }
    this.tool = this.tools[ed.kind] || this.tools.select;
    // Semantic and depth datasets are labelled per pixel, with tools of their own (masks.js).
    this.pixels = pixelEditor(this);
    if (this.pixels) {
      this.tools = this.pixels.tools;
      this.tool = this.pixels.tool;
    }

    this.renderer = new Renderer(this.canvas, {
      view: this.view,
      width: ed.width,
      height: ed.height,
      dims: ed.dims,
      skeleton: data.skeleton,
      colorOf: (id) => ed.colorOf(id),
      nameOf: (id) => ed.nameOf(id),
      labels: () => ed.labels,
      groups: () => ed.groups(),
      suggestions: () => ed.suggestions(),
      selection: () => ed.selection,
      hover: () => ed.hover,
      preview: (ctx, view) => {
        this.pixels?.draw(ctx, view);
        this.tool.draw(ctx, view);
      },
    });
    this.assist = new Assist(root, this);
    this.panel = new Panel(root, this);
    ed.on(() => this.renderer.request());

    this.bindPointer();
    this.bindKeys();
    this.bindResize();
    this.loadImage();
    this.setTool(this.tool.name);
    window.addEventListener("beforeunload", (event) => {
      if (!this.leaving && ed.canEdit && ed.saver.pending) {
        event.preventDefault();
        event.returnValue = "";
      }
    });
  }

  async start() {
    let ok = await this.editor.load();
    if (ok && this.pixels) ok = await this.pixels.load();
    this.root.dataset.ready = ok ? "true" : "false";
  }

  loadImage() {
    const img = new Image();
    img.decoding = "async";
    img.onload = () => {
      const keep = (bitmap) => this.renderer.setImage(img, bitmap);
      if (window.createImageBitmap) createImageBitmap(img).then(keep, () => keep(null));
      else keep(null);
    };
    img.onerror = () => {
      this.renderer.imageError = "Could not load the image.";
      this.renderer.request();
    };
    img.src = this.data.image.url;
  }

  // --- tools and actions ----------------------------------------------------------------------

  setTool(name) {
    const tool = this.tools[name];
    if (!tool) {
      if (name === "sam") this.assist.samTool();
      return;
    }
    if (tool !== this.tool) this.tool.cancel();
    this.tool = tool;
    this.canvas.style.cursor = tool.cursor;
    this.panel.renderTool(tool.name);
    this.refreshHint();
    this.renderer.request();
  }

  refreshHint() {
    this.panel.setHint(this.tool.hint());
  }

  action(name) {
    const ed = this.editor;
    if (name === "undo") ed.undo();
    else if (name === "redo") ed.redo();
    else if (name === "delete") ed.deleteSelected();
    else if (name === "fit") this.fit();
    else if (name === "zoom-in") this.zoomBy(1.25);
    else if (name === "zoom-out") this.zoomBy(0.8);
    else if (name === "help") this.panel.toggleHelp();
    else if (name === "help-close") this.panel.toggleHelp(false);
  }

  fit() {
    this.view.fit();
    this.viewChanged();
  }

  zoomBy(factor) {
    this.view.zoomAt(this.view.cssWidth / 2, this.view.cssHeight / 2, factor);
    this.viewChanged();
  }

  viewChanged() {
    this.panel.renderZoom(this.view.scale);
    this.renderer.request();
  }

  /** Leaves for another page once the labels are saved; stays (and says why) if they are not. */
  async go(url) {
    const ed = this.editor;
    if (!url) return;
    if (ed.canEdit && ed.saver.pending) {
      this.panel.say("Saving before leaving…");
      if (!(await ed.saver.flush())) {
        this.panel.say("Not leaving: the labels are not saved (see the save state).", true);
        return;
      }
    }
    this.leaving = true;
    window.location.href = url;
  }

  // --- mouse ----------------------------------------------------------------------------------

  point(event) {
    const rect = this.canvas.getBoundingClientRect();
    const sx = event.clientX - rect.left;
    const sy = event.clientY - rect.top;
    return { sx, sy, x: this.view.toImageX(sx), y: this.view.toImageY(sy), event };
  }

  bindPointer() {
    const c = this.canvas;
    c.addEventListener("pointerdown", (event) => {
      c.focus({ preventScroll: true });
      if (!this.editor.loaded || this.panel.helpOpen) return;
      const p = this.point(event);
      this.pointerAt = { sx: p.sx, sy: p.sy };
      let result = null;
      if (event.button === 1 || (event.button === 0 && this.spaceDown)) result = "pan";
      else if (event.button === 0) result = this.tool.down(p);
      if (result === "pan") this.pan = { sx: p.sx, sy: p.sy };
      if (result) {
        event.preventDefault();
        c.setPointerCapture(event.pointerId);
      }
      this.updateCursor(p);
      this.renderer.request();
    });
    c.addEventListener("pointermove", (event) => {
      const p = this.point(event);
      if (this.pan) {
        this.view.panBy(p.sx - this.pan.sx, p.sy - this.pan.sy);
        this.pan = { sx: p.sx, sy: p.sy };
        this.viewChanged();
        return;
      }
      if (!this.editor.loaded) return;
      this.pointerAt = { sx: p.sx, sy: p.sy };
      this.tool.move(p);
      this.updateHover(p);
      this.updateCursor(p);
      this.renderer.request();
    });
    const end = (event) => {
      if (this.pan) {
        this.pan = null;
      } else if (this.editor.loaded && event.button === 0) {
        const p = this.point(event);
        // A drag ends where the pointer was let go, even when the page had not handled the
        // moves that led there yet (a busy page in CI: an oriented box turned 72° of 90°).
        const at = this.pointerAt;
        if (at && (at.sx !== p.sx || at.sy !== p.sy)) this.tool.move(p);
        this.tool.up(p);
      }
      this.pointerAt = null;
      this.updateCursor(this.point(event));
      this.renderer.request();
    };
    c.addEventListener("pointerup", end);
    c.addEventListener("pointercancel", () => {
      this.pan = null;
      this.tool.cancel();
      this.renderer.request();
    });
    c.addEventListener("pointerleave", () => {
      this.tool.leave?.();
      if (this.editor.hover !== -1) this.editor.hover = -1;
      this.renderer.request();
    });
    c.addEventListener("dblclick", (event) => {
      if (this.editor.loaded) this.tool.dblclick(this.point(event));
    });
    c.addEventListener("contextmenu", (event) => {
      event.preventDefault();
      if (this.editor.loaded && this.editor.canEdit) this.tool.contextmenu(this.point(event));
    });
    // No middle-click autoscroll or paste: the middle button pans.
    c.addEventListener("mousedown", (event) => event.button === 1 && event.preventDefault());
    c.addEventListener("auxclick", (event) => event.button === 1 && event.preventDefault());
    c.addEventListener("wheel", (event) => {
      event.preventDefault();
      const p = this.point(event);
      const delta = event.deltaMode === 1 ? event.deltaY * 16 : event.deltaMode === 2 ? event.deltaY * 400 : event.deltaY;
      this.view.zoomAt(p.sx, p.sy, Math.exp(-delta * WHEEL_ZOOM));
      this.viewChanged();
    }, { passive: false });
  }

  updateHover(p) {
    const ed = this.editor;
    const busy = this.tool.drag || this.tool.busy || this.tool.rect;
    const hover = busy ? -1 : hitTest(ed.labels, p.x, p.y, 4 / this.view.scale, ed.width, ed.height);
    if (hover !== ed.hover) {
      ed.hover = hover;
      this.renderer.request();
    }
  }

  updateCursor() {
    let cursor = this.tool.cursor;
    if (this.pan) cursor = "grabbing";
    else if (this.spaceDown) cursor = "grab";
    else if (this.tool.name === "select" && this.editor.hover >= 0 && this.editor.canEdit) cursor = "move";
    if (this.canvas.style.cursor !== cursor) this.canvas.style.cursor = cursor;
  }

  // --- keyboard -------------------------------------------------------------------------------

  bindKeys() {
    document.addEventListener("keydown", (event) => this.keydown(event));
    document.addEventListener("keyup", (event) => {
      if (event.key === " ") {
        this.spaceDown = false;
        this.updateCursor();
      }
    });
    window.addEventListener("blur", () => {
      this.spaceDown = false;
    });
  }

  keydown(event) {
    const target = event.target;
    if (target && (/^(INPUT|SELECT|TEXTAREA)$/.test(target.tagName) || target.isContentEditable)) return;
    const ed = this.editor;
    const key = event.key;
    // Enter and Space on a focused button or link press it, as everywhere else.
    if ((key === "Enter" || key === " ") && target && target.closest && target.closest("button, a[href], summary")) return;
    const lower = key.length === 1 ? key.toLowerCase() : key;
    const mod = event.ctrlKey || event.metaKey;
    if (this.panel.helpOpen) {
      if (key === "Escape" || key === "?") {
        this.panel.toggleHelp(false);
        event.preventDefault();
      }
      return;
    }
    if (key === "?") return this.handled(event, () => this.panel.toggleHelp(true));
    if (!ed.loaded) return;
    if (this.pixels && this.pixels.key(event)) return this.handled(event, () => this.renderer.request());
    if (mod && !event.altKey) {
      if (lower === "z" && event.shiftKey) return this.handled(event, () => ed.redo());
      if (lower === "z") return this.handled(event, () => ed.undo());
      if (lower === "y") return this.handled(event, () => ed.redo());
      if (lower === "c" && !window.getSelection().toString()) {
        return this.handled(event, () => {
          const n = ed.copy();
          this.panel.say(`Copied ${n} shape${n === 1 ? "" : "s"}.`);
        });
      }
      if (lower === "v" && ed.canEdit) {
        return this.handled(event, () => {
          const n = ed.paste();
          this.panel.say(n ? `Pasted ${n} shape${n === 1 ? "" : "s"}.` : "Nothing to paste: copy shapes with Ctrl+C first.");
        });
      }
      return;
    }
    if (event.altKey) return;
    if (key === " ") {
      event.preventDefault();
      if (!this.spaceDown) {
        this.spaceDown = true;
        this.updateCursor();
      }
      return;
    }
    if (this.tool.key(event)) return this.handled(event, () => this.renderer.request());
    if (key === "Enter" && this.assist.acceptSelected()) return this.handled(event);
    if (lower === "x" && this.assist.rejectSelected()) return this.handled(event);
    if (key === "Delete" || key === "Backspace") return this.handled(event, () => ed.deleteSelected());
    if (key === "Escape") return this.handled(event, () => ed.selectNone());
    if (/^[1-9]$/.test(key)) {
      const c = ed.classes[Number(key) - 1];
      return this.handled(event, () => c && ed.pickClass(c.id));
    }
    const nav = this.data.nav;
    if (lower === "d" || key === "ArrowRight") return this.handled(event, () => this.go(nav.next));
    if (lower === "a" || key === "ArrowLeft") return this.handled(event, () => this.go(nav.prev));
    if (lower === "n") {
      return this.handled(event, () => (nav.next_unlabelled ? this.go(nav.next_unlabelled) : this.panel.say("No unlabelled image after this one.")));
    }
    if (lower === "f" || key === "0") return this.handled(event, () => this.fit());
    if (key === "+" || key === "=") return this.handled(event, () => this.zoomBy(1.25));
    if (key === "-") return this.handled(event, () => this.zoomBy(0.8));
    if (lower === "v") return this.handled(event, () => ed.cycleVisibility());
    if (TOOL_KEYS[lower]) {
      const name = TOOL_KEYS[lower];
      if (name === "sam" && ed.canEdit && (ed.kind === "polygon" || ed.kind === "box")) return this.handled(event, () => this.assist.samTool());
      if (this.tools[name]) return this.handled(event, () => this.setTool(name));
    }
  }

  handled(event, fn) {
    event.preventDefault();
    if (fn) fn();
  }

  // --- layout ---------------------------------------------------------------------------------

  bindResize() {
    const observer = new ResizeObserver(() => {
      const rect = this.stage.getBoundingClientRect();
      this.view.resize(rect.width, rect.height);
      this.renderer.resize(rect.width, rect.height);
      if (!this.fitted) {
        this.fitted = true;
        this.view.fit();
      }
      this.viewChanged();
    });
    observer.observe(this.stage);
  }

  /** window.kestrelEditor: read-only state for tests and the bench. */
  expose() {
    const ed = this.editor;
    const view = this.view;
    const renderer = this.renderer;
    const canvas = this.canvas;
    return Object.freeze({
      ready: () => ed.loaded,
      labels: () => cloneLabels(ed.labels),
      suggestions: () => ed.suggestions().map((s) => ({ ...s, data: s.data.slice() })),
      selected: () => {
        const label = ed.selected();
        if (label) return { index: ed.selection.index, ...cloneLabel(label) };
        return ed.selection.suggestion !== null ? { suggestion: ed.selection.suggestion } : null;
      },
      view: () => ({ scale: view.scale, x: view.x, y: view.y }),
      revision: () => ed.saver.revision,
      status: () => ed.status,
      tool: () => this.tool.name,
      classId: () => ed.classId,
      imageLoaded: () => Boolean(renderer.image),
      /** Page coordinates of a point given in normalised image coordinates. */
      toClient: (nx, ny) => {
        const rect = canvas.getBoundingClientRect();
        return [rect.left + view.toScreenX(nx * ed.width), rect.top + view.toScreenY(ny * ed.height)];
      },
      /** Draw times (ms) of the frames drawn since the last call, oldest first (at most 512). */
      drawTimes: () => {
        const ring = renderer.drawTimes;
        const n = Math.min(renderer.drawCount - this.drawTimesSeen, ring.length);
        const out = [];
        for (let i = renderer.drawCount - n; i < renderer.drawCount; i++) out.push(ring[i % ring.length]);
        this.drawTimesSeen = renderer.drawCount;
        return out;
      },
    });
  }
}

const root = document.getElementById("editor");
const dataElement = document.getElementById("editor-data");
if (root && dataElement) {
  const app = new App(root, JSON.parse(dataElement.textContent));
  window.kestrelEditor = app.expose();
  app.start();
}
