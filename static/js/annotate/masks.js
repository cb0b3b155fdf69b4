// Per-pixel tasks in the editor. Semantic: a mask of class indexes painted over the image (brush,
// eraser, polygon fill, a GrabCut region to accept, a semantic model's proposed mask to accept
// whole or per class), undone and redone by rectangles, autosaved as an 8-bit greyscale PNG made
// here. Depth: the image and its colour-mapped depth map side by
// side, the value under the cursor in metres.
//
// The mask lives in a Uint8Array of the image's full size (255 = no class). What is on screen
// comes from an offscreen canvas of the same size, rewritten only in the rectangle that changed
// since the last frame (and a ≤2048 px preview of it for zoomed-out frames), so a stroke on a
// 4000×3000 image costs its own few thousand pixels per frame, not twelve million.

import { Saver } from "./io.js";
import { SelectTool } from "./tools/index.js";

export const IGNORE = 255;
const PREVIEW_SIZE = 2048;
const BRUSH_SIZES = [1, 2, 3, 5, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256]; // diameters, px
const DEFAULT_BRUSH = 5; // index into BRUSH_SIZES: 12 px
const CLOSE_PX = 8; // a click this near the first point closes the polygon
const UNDO_BYTES = 256 * 1024 * 1024; // before + after pixels kept for undo, at most
const CLICK_PX = 3;
const STRIPE_PX = 8; // a power of two: the width of a suggestion's diagonal bands
const PROPOSAL_ALPHA = [150, 40]; // a suggestion's two bands: translucent, fainter

const clamp = (v, lo, hi) => (v < lo ? lo : v > hi ? hi : v);

/** The view's size in image pixels: depth shows the map beside the image, a gap between. */
export function viewSize(data) {
  const { width, height } = data.image;
  return data.dataset.task === "depth" ? [width * 2 + depthGap(width), height] : [width, height];
}

function depthGap(width) {
  return Math.max(8, Math.round(width * 0.03));
}

// --- bytes in and out --------------------------------------------------------------------------

/** The image's stored map, raw: {revision, values (Uint8Array | Uint16Array) or null}. */
async function pixelsFetch(url) {
  let response;
  try {
    response = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/octet-stream" } });
  } catch {
    return { error: "Could not reach the server. Check the connection." };
  }
  const revision = Number(response.headers.get("X-Revision"));
  if (response.status === 204) return { revision, values: null };
  if (!response.ok) {
    let detail = `The server answered ${response.status}.`;
    try {
      detail = (await response.json()).detail || detail;
    } catch {
      // not JSON: the status says it
    }
    return { error: detail };
  }
  const inflated = response.body.pipeThrough(new DecompressionStream("deflate"));
  const buffer = await new Response(inflated).arrayBuffer();
  const wide = response.headers.get("X-Dtype") === "uint16";
  // Little-endian on the wire, as every platform a browser runs on stores it.
  const values = wide ? new Uint16Array(buffer) : new Uint8Array(buffer);
  return {
    revision,
    values,
    width: Number(response.headers.get("X-Width")),
    height: Number(response.headers.get("X-Height")),
  };
}

const CRC_TABLE = (() => {
  const table = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    table[n] = c >>> 0;
  }
  return table;
})();

function crc32(parts) {
  let c = 0xffffffff;
  for (const bytes of parts) for (let i = 0; i < bytes.length; i++) c = CRC_TABLE[(c ^ bytes[i]) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

function pngChunk(type, data) {
  const head = new Uint8Array(8);
  const view = new DataView(head.buffer);
  view.setUint32(0, data.length);
  const name = new TextEncoder().encode(type);
  head.set(name, 4);
  const tail = new Uint8Array(4);
  new DataView(tail.buffer).setUint32(0, crc32([name, data]));
  return [head, data, tail];
}

/** An 8-bit greyscale PNG of `values` (rows of `width`), deflated by the browser itself. The
 * pixels are copied before the first await, so painting on meanwhile cannot tear the file. */
export async function pngEncodeGrey(values, width, height) {
  const rows = new Uint8Array((width + 1) * height); // each row: filter 0, then its pixels
  for (let y = 0; y < height; y++) rows.set(values.subarray(y * width, (y + 1) * width), y * (width + 1) + 1);
  const idat = new Uint8Array(await new Response(new Blob([rows]).stream().pipeThrough(new CompressionStream("deflate"))).arrayBuffer());
  const ihdr = new Uint8Array(13);
  const view = new DataView(ihdr.buffer);
  view.setUint32(0, width);
  view.setUint32(4, height);
  ihdr[8] = 8; // bit depth
  ihdr[9] = 0; // greyscale
  const signature = new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  const parts = [signature, ...pngChunk("IHDR", ihdr), ...pngChunk("IDAT", idat), ...pngChunk("IEND", new Uint8Array(0))];
  return new Blob(parts, { type: "image/png" });
}

/** Sets `value` on the pixels of a COCO uncompressed RLE ({size: [h, w], counts}, column-major,
 * first run 0s) in `values` (rows of `width`); false when the RLE is not of this size. */
export function rleFill(rle, values, width, height, value) {
  if (!rle || !Array.isArray(rle.size) || rle.size[0] !== height || rle.size[1] !== width) return false;
  let p = 0;
  const end = width * height;
  for (let k = 0; k < rle.counts.length; k++) {
    const n = rle.counts[k];
    if (k % 2) {
      let left = Math.min(n, end - p);
      while (left > 0) {
        const x = Math.floor(p / height);
        const y = p - x * height;
        const run = Math.min(left, height - y);
        for (let i = 0, at = y * width + x; i < run; i++, at += width) values[at] = value;
        p += run;
        left -= run;
      }
    } else {
      p += n;
    }
  }
  return p === end;
}

// --- colours -----------------------------------------------------------------------------------

/** RGBA as one little-endian Uint32 (what a Uint32Array over ImageData holds). */
function packed(r, g, b, a) {
  return ((a << 24) | (b << 16) | (g << 8) | r) >>> 0;
}

function hexPacked(hex, alpha = 255) {
  const n = parseInt(hex.slice(1), 16);
  return packed((n >> 16) & 255, (n >> 8) & 255, n & 255, alpha);
}

/** Google's Turbo colour map (polynomial fit), t in 0..1 → [r, g, b] 0..255. */
function turbo(t) {
  const x = clamp(t, 0, 1);
  const x2 = x * x;
  const x3 = x2 * x;
  const x4 = x2 * x2;
  const x5 = x4 * x;
  const r = 0.13572138 + 4.6153926 * x - 42.66032258 * x2 + 132.13108234 * x3 - 152.94239396 * x4 + 59.28637943 * x5;
  const g = 0.09140261 + 2.19418839 * x + 4.84296658 * x2 - 14.18503333 * x3 + 4.27729857 * x4 + 2.82956604 * x5;
  const b = 0.1066733 + 12.64194608 * x - 60.58204836 * x2 + 110.36276771 * x3 - 89.90310912 * x4 + 27.34824973 * x5;
  return [r, g, b].map((v) => Math.round(clamp(v, 0, 1) * 255));
}

// --- the offscreen picture of a map -----------------------------------------------------------

/** A full-size canvas of `values` coloured through `lut` (value → packed RGBA), rewritten a
 * rectangle at a time, with a smaller copy drawn when zoomed out. With `stripes` (a second
 * lut), diagonal bands alternate between the two: how a suggestion shows it is not painted. */
class PixelLayer {
  constructor(width, height, values, lut, stripes = null) {
    Object.assign(this, { width, height, values, lut, stripes });
    this.canvas = document.createElement("canvas");
    this.canvas.width = width;
    this.canvas.height = height;
    this.ctx = this.canvas.getContext("2d");
    const ratio = PREVIEW_SIZE / Math.max(width, height);
    this.preview = null;
    if (ratio < 0.75) {
      const canvas = document.createElement("canvas");
      canvas.width = Math.max(1, Math.round(width * ratio));
      canvas.height = Math.max(1, Math.round(height * ratio));
      const ctx = canvas.getContext("2d");
      ctx.imageSmoothingEnabled = false;
      this.preview = { canvas, ctx, rx: canvas.width / width, ry: canvas.height / height };
    }
    this.dirty = null;
  }

  mark(x0, y0, x1, y1) {
    x0 = clamp(Math.floor(x0), 0, this.width);
    y0 = clamp(Math.floor(y0), 0, this.height);
    x1 = clamp(Math.ceil(x1), 0, this.width);
    y1 = clamp(Math.ceil(y1), 0, this.height);
    if (x1 <= x0 || y1 <= y0) return;
    const d = this.dirty;
    this.dirty = d ? { x0: Math.min(d.x0, x0), y0: Math.min(d.y0, y0), x1: Math.max(d.x1, x1), y1: Math.max(d.y1, y1) } : { x0, y0, x1, y1 };
  }

  markAll() {
    this.dirty = { x0: 0, y0: 0, x1: this.width, y1: this.height };
  }

  /** Rewrites what changed since the last frame: the canvas, then the preview from it. */
  flush() {
    const d = this.dirty;
    if (!d) return;
    this.dirty = null;
    const { width, values, lut, stripes } = this;
    const band = Math.max(1, Math.floor((4 * 1024 * 1024) / (d.x1 - d.x0))); // ≤ 16 MB ImageData
    for (let top = d.y0; top < d.y1; top += band) {
      const bottom = Math.min(d.y1, top + band);
      const w = d.x1 - d.x0;
      const image = this.ctx.createImageData(w, bottom - top);
      const out = new Uint32Array(image.data.buffer);
      let o = 0;
      for (let y = top; y < bottom; y++) {
        let i = y * width + d.x0;
        if (stripes) {
          for (let x = d.x0; x < d.x0 + w; x++) out[o++] = ((x + y) & STRIPE_PX ? stripes : lut)[values[i++]];
        } else {
          for (let x = 0; x < w; x++) out[o++] = lut[values[i++]];
        }
      }
      this.ctx.putImageData(image, d.x0, top);
    }
    const p = this.preview;
    if (p) {
      const px0 = Math.floor(d.x0 * p.rx);
      const py0 = Math.floor(d.y0 * p.ry);
      const px1 = Math.min(p.canvas.width, Math.ceil(d.x1 * p.rx));
      const py1 = Math.min(p.canvas.height, Math.ceil(d.y1 * p.ry));
      const sx0 = px0 / p.rx;
      const sy0 = py0 / p.ry;
      const sx1 = Math.min(this.width, px1 / p.rx);
      const sy1 = Math.min(this.height, py1 / p.ry);
      p.ctx.clearRect(px0, py0, px1 - px0, py1 - py0);
      p.ctx.drawImage(this.canvas, sx0, sy0, sx1 - sx0, sy1 - sy0, px0, py0, px1 - px0, py1 - py0);
    }
  }

  /** Draws the part on screen, its left edge at image x = `offset`. */
  draw(ctx, view, offset = 0, alpha = 1) {
    this.flush();
    const ix0 = Math.max(0, view.toImageX(0) - offset);
    const iy0 = Math.max(0, view.toImageY(0));
    const ix1 = Math.min(this.width, view.toImageX(view.cssWidth) - offset);
    const iy1 = Math.min(this.height, view.toImageY(view.cssHeight));
    if (ix1 <= ix0 || iy1 <= iy0 || alpha <= 0) return;
    const p = this.preview;
    const usePreview = p && view.scale <= p.rx * 1.2;
    const source = usePreview ? p.canvas : this.canvas;
    const rx = usePreview ? p.rx : 1;
    const ry = usePreview ? p.ry : 1;
    ctx.save();
    ctx.globalAlpha = alpha;
    ctx.imageSmoothingEnabled = false; // class edges stay edges
    ctx.drawImage(
      source,
      ix0 * rx, iy0 * ry, (ix1 - ix0) * rx, (iy1 - iy0) * ry,
      view.toScreenX(ix0 + offset), view.toScreenY(iy0), (ix1 - ix0) * view.scale, (iy1 - iy0) * view.scale,
    );
    ctx.restore();
  }
}

// --- the mask and its undo --------------------------------------------------------------------

/** The mask's pixels, what was last recorded (`base`), and undo by rectangles: a step keeps
 * the pixels of the rectangle it changed, before and after. */
class Mask {
  constructor(width, height) {
    this.width = width;
    this.height = height;
    this.values = new Uint8Array(width * height).fill(IGNORE);
    this.base = this.values.slice();
    this.changed = null; // the rectangle changed since the last record()
    this.steps = [];
    this.at = 0;
    this.bytes = 0;
    this.onPaint = () => {};
  }

  load(values) {
    this.values.set(values);
    this.base.set(values);
    this.steps = [];
    this.at = 0;
    this.bytes = 0;
  }

  grow(x0, y0, x1, y1) {
    x0 = clamp(Math.floor(x0), 0, this.width);
    y0 = clamp(Math.floor(y0), 0, this.height);
    x1 = clamp(Math.ceil(x1), 0, this.width);
    y1 = clamp(Math.ceil(y1), 0, this.height);
    if (x1 <= x0 || y1 <= y0) return null;
    const c = this.changed;
    this.changed = c ? { x0: Math.min(c.x0, x0), y0: Math.min(c.y0, y0), x1: Math.max(c.x1, x1), y1: Math.max(c.y1, y1) } : { x0, y0, x1, y1 };
    this.onPaint(x0, y0, x1, y1);
    return { x0, y0, x1, y1 };
  }

  /** Paints a round brush of `diameter` along the segment a → b (pixel centres within reach). */
  stroke(ax, ay, bx, by, diameter, value) {
    const r = diameter / 2;
    const box = this.grow(Math.min(ax, bx) - r - 1, Math.min(ay, by) - r - 1, Math.max(ax, bx) + r + 1, Math.max(ay, by) + r + 1);
    if (!box) return;
    const { width, values } = this;
    const dx = bx - ax;
    const dy = by - ay;
    const len2 = dx * dx + dy * dy;
    const r2 = r * r;
    for (let y = box.y0; y < box.y1; y++) {
      const cy = y + 0.5;
      const row = y * width;
      for (let x = box.x0; x < box.x1; x++) {
        const cx = x + 0.5;
        let t = len2 ? ((cx - ax) * dx + (cy - ay) * dy) / len2 : 0;
        t = t < 0 ? 0 : t > 1 ? 1 : t;
        const ex = cx - (ax + t * dx);
        const ey = cy - (ay + t * dy);
        if (ex * ex + ey * ey <= r2) values[row + x] = value;
      }
    }
  }

  /** Fills a polygon [[x, y], ...] of image pixels: the pixels whose centres are inside. */
  fillPolygon(points, value) {
    if (points.length < 3) return false;
    let minY = Infinity;
    let maxY = -Infinity;
    let minX = Infinity;
    let maxX = -Infinity;
    for (const [x, y] of points) {
      minY = Math.min(minY, y);
      maxY = Math.max(maxY, y);
      minX = Math.min(minX, x);
      maxX = Math.max(maxX, x);
    }
    const box = this.grow(minX - 1, minY - 1, maxX + 1, maxY + 1);
    if (!box) return false;
    const { width, values } = this;
    const xs = [];
    for (let y = box.y0; y < box.y1; y++) {
      const cy = y + 0.5;
      xs.length = 0;
      for (let i = 0, j = points.length - 1; i < points.length; j = i++) {
        const [x1, y1] = points[i];
        const [x2, y2] = points[j];
        if (y1 <= cy !== y2 <= cy) xs.push(x1 + ((cy - y1) * (x2 - x1)) / (y2 - y1));
      }
      xs.sort((a, b) => a - b);
      for (let k = 0; k + 1 < xs.length; k += 2) {
        const from = Math.max(0, Math.ceil(xs[k] - 0.5));
        const to = Math.min(width - 1, Math.floor(xs[k + 1] - 0.5));
        if (to >= from) values.fill(value, y * width + from, y * width + to + 1);
      }
    }
    return true;
  }

  /** Makes what changed since the last record one undo step; false when nothing changed. */
  record() {
    const c = this.changed;
    this.changed = null;
    if (!c) return false;
    const before = this.cut(this.base, c);
    const after = this.cut(this.values, c);
    if (before.every((v, i) => v === after[i])) return false;
    this.paste(this.base, c, after);
    this.steps.length = this.at;
    this.steps.push({ ...c, before, after });
    this.bytes = this.steps.reduce((n, s) => n + s.before.length * 2, 0);
    while (this.bytes > UNDO_BYTES && this.steps.length > 1) this.bytes -= this.steps.shift().before.length * 2;
    this.at = this.steps.length;
    return true;
  }

  cut(source, c) {
    const w = c.x1 - c.x0;
    const out = new Uint8Array(w * (c.y1 - c.y0));
    for (let y = c.y0; y < c.y1; y++) out.set(source.subarray(y * this.width + c.x0, y * this.width + c.x1), (y - c.y0) * w);
    return out;
  }

  paste(target, c, pixels) {
    const w = c.x1 - c.x0;
    for (let y = c.y0; y < c.y1; y++) target.set(pixels.subarray((y - c.y0) * w, (y - c.y0 + 1) * w), y * this.width + c.x0);
  }

  apply(step, pixels) {
    this.paste(this.values, step, pixels);
    this.paste(this.base, step, pixels);
    this.onPaint(step.x0, step.y0, step.x1, step.y1);
  }

  canUndo() {
    return this.at > 0;
  }

  canRedo() {
    return this.at < this.steps.length;
  }

  undo() {
    if (!this.canUndo()) return false;
    this.at -= 1;
    this.apply(this.steps[this.at], this.steps[this.at].before);
    return true;
  }

  redo() {
    if (!this.canRedo()) return false;
    this.apply(this.steps[this.at], this.steps[this.at].after);
    this.at += 1;
    return true;
  }

  /** Pixels per value (a 256-long histogram). */
  histogram() {
    const counts = new Uint32Array(256);
    const values = this.values;
    for (let i = 0; i < values.length; i++) counts[values[i]] += 1;
    return counts;
  }
}

// --- tools -------------------------------------------------------------------------------------

/** What the mask tools share: the tool interface main.js calls (as tools/base.js has it). */
class MaskTool {
  constructor(app, pixels) {
    this.app = app;
    this.pixels = pixels;
    this.view = app.view;
    this.drag = null;
  }

  get cursor() {
    return "crosshair";
  }

  hint() {
    return "";
  }

  down() {
    return false;
  }

  move() {}

  up() {}

  cancel() {}

  leave() {}

  key() {
    return false;
  }

  dblclick() {}

  contextmenu() {}

  draw() {}
}

class BrushTool extends MaskTool {
  constructor(app, pixels, erase) {
    super(app, pixels);
    this.erase = erase;
    this.name = erase ? "eraser" : "brush";
    this.last = null;
    this.hover = null;
  }

  get cursor() {
    return "none";
  }

  hint() {
    const p = this.pixels;
    const what = this.erase ? "Erase (back to no class)" : `Paint ${p.className()}`;
    return `${what}: drag. Size ${p.brush} px ([ and ] change it).`;
  }

  down(p) {
    if (!this.pixels.ready) return false;
    this.last = { x: p.x, y: p.y };
    this.pixels.stroke(p.x, p.y, p.x, p.y, this.erase);
    return "handled";
  }

  move(p) {
    this.hover = p;
    if (!this.last) return;
    this.pixels.stroke(this.last.x, this.last.y, p.x, p.y, this.erase);
    this.last = { x: p.x, y: p.y };
  }

  up(p) {
    if (!this.last) return;
    this.move(p);
    this.last = null;
    this.pixels.record();
  }

  cancel() {
    if (this.last) {
      this.last = null;
      this.pixels.record(); // what was painted stays, as one step
    }
  }

  leave() {
    this.hover = null;
  }

  draw(ctx, view) {
    if (!this.hover) return;
    const r = Math.max(1.5, (this.pixels.brush / 2) * view.scale);
    const x = view.toScreenX(this.hover.x);
    const y = view.toScreenY(this.hover.y);
    ctx.beginPath();
    ctx.arc(x, y, r, 0, Math.PI * 2);
    ctx.lineWidth = 3;
    ctx.strokeStyle = "rgba(0,0,0,.6)";
    ctx.stroke();
    ctx.lineWidth = 1.5;
    ctx.strokeStyle = this.erase ? "#ffffff" : this.pixels.classColour();
    ctx.stroke();
  }
}

class FillTool extends MaskTool {
  constructor(app, pixels) {
    super(app, pixels);
    this.name = "fill";
    this.points = [];
    this.hover = null;
  }

  get busy() {
    return this.points.length > 0;
  }

  hint() {
    if (!this.points.length) return `Polygon fill with ${this.pixels.className()}: click the corners.`;
    return "Click the first point or press Enter to fill; Backspace removes the last point; Esc cancels.";
  }

  down(p) {
    const pts = this.points;
    const x = clamp(p.x, 0, this.pixels.width);
    const y = clamp(p.y, 0, this.pixels.height);
    if (pts.length >= 3) {
      const [fx, fy] = pts[0];
      if (Math.hypot(this.view.toScreenX(fx) - p.sx, this.view.toScreenY(fy) - p.sy) <= CLOSE_PX) {
        this.close();
        return "handled";
      }
    }
    const lastPoint = pts[pts.length - 1];
    if (!lastPoint || Math.hypot((lastPoint[0] - x) * this.view.scale, (lastPoint[1] - y) * this.view.scale) > CLICK_PX) pts.push([x, y]);
    this.app.refreshHint();
    return "handled";
  }

  move(p) {
    this.hover = p;
  }

  close() {
    if (this.points.length < 3) return false;
    this.pixels.fill(this.points);
    this.points = [];
    this.app.refreshHint();
    return true;
  }

  cancel() {
    this.points = [];
    this.app.refreshHint();
  }

  key(event) {
    if (event.key === "Enter" && this.points.length) return this.close() || true;
    if (event.key === "Backspace" && this.points.length) {
      this.points.pop();
      this.app.refreshHint();
      return true;
    }
    if (event.key === "Escape" && this.points.length) {
      this.cancel();
      return true;
    }
    return false;
  }

  draw(ctx, view) {
    const pts = this.points;
    if (!pts.length) return;
    ctx.beginPath();
    ctx.moveTo(view.toScreenX(pts[0][0]), view.toScreenY(pts[0][1]));
    for (const [x, y] of pts.slice(1)) ctx.lineTo(view.toScreenX(x), view.toScreenY(y));
    if (this.hover) ctx.lineTo(view.toScreenX(this.hover.x), view.toScreenY(this.hover.y));
    ctx.lineWidth = 2;
    ctx.strokeStyle = this.pixels.classColour();
    ctx.stroke();
    for (const [i, [x, y]] of pts.entries()) {
      ctx.beginPath();
      ctx.arc(view.toScreenX(x), view.toScreenY(y), i === 0 ? 6 : 3.5, 0, Math.PI * 2);
      ctx.fillStyle = i === 0 ? "#fff" : this.pixels.classColour();
      ctx.fill();
      ctx.lineWidth = 1.5;
      ctx.strokeStyle = "#111";
      ctx.stroke();
    }
  }
}

/** Drag a rough box: GrabCut (the smart-polygon endpoint) outlines the object in it, shown as a
 * suggestion that Enter paints with the current class. */
class RegionTool extends MaskTool {
  constructor(app, pixels) {
    super(app, pixels);
    this.name = "smart";
    this.rect = null;
  }

  hint() {
    if (this.pixels.suggestion) return `Enter paints the outlined region as ${this.pixels.className()}; X or Esc discards it.`;
    return "Smart region: drag a rough box around one object (GrabCut outlines it).";
  }

  down(p) {
    this.rect = { x0: p.x, y0: p.y, x1: p.x, y1: p.y, sx0: p.sx, sy0: p.sy };
    return "handled";
  }

  move(p) {
    if (!this.rect) return;
    this.rect.x1 = p.x;
    this.rect.y1 = p.y;
  }

  up(p) {
    const r = this.rect;
    this.rect = null;
    if (!r) return;
    if (Math.hypot(p.sx - r.sx0, p.sy - r.sy0) <= CLICK_PX) return;
    const { width, height } = this.pixels;
    const x0 = clamp(Math.min(r.x0, p.x), 0, width);
    const x1 = clamp(Math.max(r.x0, p.x), 0, width);
    const y0 = clamp(Math.min(r.y0, p.y), 0, height);
    const y1 = clamp(Math.max(r.y0, p.y), 0, height);
    this.pixels.suggestRegion([(x0 + x1) / 2 / width, (y0 + y1) / 2 / height, (x1 - x0) / width, (y1 - y0) / height]);
  }

  cancel() {
    this.rect = null;
  }

  draw(ctx, view) {
    const r = this.rect;
    if (!r) return;
    ctx.setLineDash([6, 4]);
    ctx.lineWidth = 1.5;
    ctx.strokeStyle = "#fff";
    const x = view.toScreenX(Math.min(r.x0, r.x1));
    const y = view.toScreenY(Math.min(r.y0, r.y1));
    ctx.strokeRect(x, y, Math.abs(r.x1 - r.x0) * view.scale, Math.abs(r.y1 - r.y0) * view.scale);
    ctx.setLineDash([]);
  }
}

/** Select's panning and zooming, and (depth) the reading under the cursor. */
class ViewTool extends SelectTool {
  constructor(app, pixels) {
    super(app);
    this.pixels = pixels; // its name is select's: the Select button and E stand for it
  }

  hint() {
    return "The value under the cursor is shown on the right, in metres. Drag to pan, wheel to zoom.";
  }

  move(p) {
    super.move(p);
    this.pixels.readout(p);
  }

  leave() {
    this.pixels.readout(null);
  }
}

// --- the semantic editor ------------------------------------------------------------------------

const $ = (root, selector) => root.querySelector(selector);

class SemanticPixels {
  constructor(app) {
    this.app = app;
    this.ed = app.editor;
    this.width = this.ed.width;
    this.height = this.ed.height;
    this.mask = new Mask(this.width, this.height);
    this.layer = new PixelLayer(this.width, this.height, this.mask.values, this.palette());
    this.mask.onPaint = (x0, y0, x1, y1) => this.layer.mark(x0, y0, x1, y1);
    this.brushIndex = DEFAULT_BRUSH;
    this.opacity = 0.6;
    this.suggestion = null; // {points: [[x, y], ...]} in image pixels
    // A semantic model's proposal: its rows (one a class, as the server sent them), what was
    // decided about each (id → "accepted" | "rejected"), and the ids a finished save carried.
    this.rows = [];
    this.decided = new Map();
    this.settled = new Set();
    this.sent = [];
    this.proposal = null; // {values: Uint8Array, layer: PixelLayer} of the undecided rows
    this.asking = false;
    this.ready = false;
    this.coverage = new Map();
    const root = app.root;
    this.el = {
      brush: $(root, "[data-testid=brush-size]"),
      opacity: $(root, "[data-testid=mask-opacity]"),
      opacityValue: $(root, "[data-testid=mask-opacity-value]"),
      regionActions: $(root, "[data-testid=region-actions]"),
      message: $(root, "[data-testid=mask-message]"),
      model: $(root, "[data-testid=mask-model-picker]"),
      suggest: $(root, "[data-testid=mask-suggest]"),
      progress: $(root, "[data-testid=mask-assist-progress]"),
      proposal: $(root, "[data-testid=mask-proposal]"),
      list: $(root, "[data-testid=mask-suggestion-list]"),
    };
    this.tools = {};
    if (this.ed.canEdit) {
      this.tools = {
        brush: new BrushTool(app, this, false),
        eraser: new BrushTool(app, this, true),
        fill: new FillTool(app, this),
        smart: new RegionTool(app, this),
      };
      this.tool = this.tools.brush;
    } else {
      this.tools = { select: new ViewTool(app, this) }; // viewers pan and zoom
      this.tool = this.tools.select;
    }
    this.bind();
    this.adoptEditor();
  }

  /** The editor's undo, redo, saving and class counts become the mask's (editor.js keeps
   * labels; a semantic image has none). Ctrl+Z, the buttons and leaving the page go through
   * these as they do for labels. */
  adoptEditor() {
    const ed = this.ed;
    const mask = this.mask;
    // An accepted suggestion is a mask step: undoing it offers the suggestion again.
    ed.undo = () => {
      if (!ed.canEdit || !this.busyFree()) return false;
      const step = mask.steps[mask.at - 1];
      if (!mask.undo()) return false;
      if (step.accepted) this.decide(step.accepted, null);
      return this.changed();
    };
    ed.redo = () => {
      if (!ed.canEdit || !this.busyFree()) return false;
      const step = mask.steps[mask.at];
      if (!mask.redo()) return false;
      if (step.accepted) this.decide(step.accepted, "accepted");
      return this.changed();
    };
    ed.counts = () => this.coverage;
    // The model's masks are drawn and decided here, not as the editor's dashed shapes.
    ed.suggestions = () => [];
    const api = { put: (url, body) => this.put(url, body) };
    ed.saver = new Saver({
      api,
      url: ed.data.mask_url,
      revision: 0,
      payload: () => this.decisions(),
      onState: (state, message, details) => ed.emit("save", { state, message, details }),
      onSaved: (answer) => {
        for (const id of this.sent) this.settled.add(id);
        ed.setReview(answer.status, answer.review_comment);
      },
      delay: 600,
    });
  }

  busyFree() {
    return !this.app.tool.last && !this.app.tool.rect && !this.app.tool.busy;
  }

  palette() {
    const lut = new Uint32Array(256); // 255 and unknown indexes: transparent
    for (const c of this.ed.classes) if (c.index < 255) lut[c.index] = hexPacked(c.color);
    return lut;
  }

  async load() {
    const answer = await pixelsFetch(this.ed.data.pixels_url);
    if (answer.error) {
      this.ed.emit("message", { text: `Could not load the mask: ${answer.error}`, error: true });
      return false;
    }
    if (answer.values) {
      if (answer.width !== this.width || answer.height !== this.height) {
        this.ed.emit("message", { text: `The stored mask is ${answer.width}×${answer.height}, not the image's ${this.width}×${this.height}.`, error: true });
        return false;
      }
      this.mask.load(answer.values);
    }
    this.ed.saver.revision = answer.revision;
    this.adoptSuggestions(this.ed.serverSuggestions);
    // editor.load() made a label history: the buttons follow the mask's instead.
    this.ed.history = { canUndo: () => this.mask.canUndo(), canRedo: () => this.mask.canRedo() };
    this.layer.markAll();
    this.countCoverage();
    this.ready = true;
    this.ed.changed();
    return true;
  }

  // --- painting -----------------------------------------------------------------------------

  get brush() {
    return BRUSH_SIZES[this.brushIndex];
  }

  classValue() {
    const c = this.ed.classById(this.ed.classId);
    return c ? c.index : IGNORE;
  }

  className() {
    const c = this.ed.classById(this.ed.classId);
    return c ? c.name : "no class";
  }

  classColour() {
    const c = this.ed.classById(this.ed.classId);
    return c ? c.color : "#ffffff";
  }

  stroke(ax, ay, bx, by, erase) {
    const value = erase ? IGNORE : this.classValue();
    if (value === IGNORE && !erase) return this.say("Add a class first: the brush paints the chosen class.", true);
    this.mask.stroke(ax, ay, bx, by, this.brush, value);
    this.app.renderer.request();
  }

  fill(points) {
    const value = this.classValue();
    if (value === IGNORE) return this.say("Add a class first: the fill paints the chosen class.", true);
    if (this.mask.fillPolygon(points, value)) this.record();
  }

  record() {
    if (this.mask.record()) this.changed();
    this.app.renderer.request();
  }

  changed() {
    this.countCoverage();
    this.ed.saver.schedule();
    this.ed.changed();
    return true;
  }

  countCoverage() {
    const counts = this.mask.histogram();
    const total = this.width * this.height;
    this.coverage = new Map();
    for (const c of this.ed.classes) {
      const n = c.index < 255 ? counts[c.index] : 0;
      if (n) this.coverage.set(c.id, `${((100 * n) / total).toFixed(n / total < 0.001 ? 2 : 1)}%`);
    }
  }

  setBrush(step) {
    this.brushIndex = clamp(this.brushIndex + step, 0, BRUSH_SIZES.length - 1);
    if (this.el.brush) this.el.brush.textContent = String(this.brush);
    this.app.refreshHint();
  }

  setOpacity(value) {
    this.opacity = clamp(value, 0, 1);
    if (this.el.opacity) this.el.opacity.value = String(Math.round(this.opacity * 100));
    if (this.el.opacityValue) this.el.opacityValue.textContent = `${Math.round(this.opacity * 100)}%`;
    this.app.renderer.request();
  }

  // --- GrabCut suggestion -------------------------------------------------------------------

  async suggestRegion(box) {
    this.say("Outlining the object…");
    const { ok, data } = await this.app.api.post(this.ed.data.smart_polygon_url, { box });
    if (!ok) return this.say(data.detail, true);
    const d = data.data;
    const points = [];
    for (let i = 0; i + 1 < d.length; i += 2) points.push([d[i] * this.width, d[i + 1] * this.height]);
    this.suggestion = { points };
    this.renderRegion();
    this.say(`Region found: Enter paints it as ${this.className()}, X discards it.`);
  }

  acceptRegion() {
    if (!this.suggestion) return false;
    const { points } = this.suggestion;
    this.suggestion = null;
    this.fill(points);
    this.renderRegion();
    this.say("");
    return true;
  }

  discardRegion() {
    if (!this.suggestion) return false;
    this.suggestion = null;
    this.renderRegion();
    this.say("");
    return true;
  }

  renderRegion() {
    if (this.el.regionActions) this.el.regionActions.hidden = !this.suggestion;
    this.app.refreshHint();
    this.app.renderer.request();
  }

  // --- a semantic model's suggestion -------------------------------------------------------

  /** The server's mask suggestions (labels_payload's): those not decided here are shown. */
  adoptSuggestions(list) {
    // Only those who can accept one see it: to a viewer it would look like the mask.
    const rows = this.ed.canEdit ? list || [] : [];
    this.rows = rows.filter((s) => s.kind === "mask" && this.ed.classById(s.class_id));
    this.renderProposal();
  }

  open() {
    return this.rows.filter((s) => !this.decided.has(s.id));
  }

  /** Marks rows `what` ("accepted", "rejected", or null: undecided again) and redraws. */
  decide(ids, what) {
    for (const id of ids) {
      if (what) this.decided.set(id, what);
      else this.decided.delete(id);
    }
    this.renderProposal();
  }

  /** What the next save tells the server: decisions it has not carried yet. */
  decisions() {
    const accepted = [];
    const rejected = [];
    for (const [id, what] of this.decided) {
      if (!this.settled.has(id)) (what === "accepted" ? accepted : rejected).push(id);
    }
    return { accepted, rejected };
  }

  async suggest() {
    const modelId = this.el.model ? Number(this.el.model.value) : NaN;
    if (!modelId || this.asking) return;
    this.asking = true;
    this.say("");
    if (this.el.progress) this.el.progress.hidden = false;
    if (this.el.suggest) this.el.suggest.disabled = true;
    const { ok, data } = await this.app.api.post(this.ed.data.suggest_url, { model_id: modelId });
    this.asking = false;
    if (this.el.progress) this.el.progress.hidden = true;
    if (this.el.suggest) this.el.suggest.disabled = false;
    if (!ok) return this.say(data.detail, true);
    this.decided = new Map([...this.decided].filter(([id]) => this.settled.has(id)));
    this.adoptSuggestions(data.suggestions);
    const n = this.open().length;
    this.say(n ? "The model's mask is shown striped: Enter fills the pixels with no class yet from it, Esc discards it." : "The model found none of this dataset's classes here.");
  }

  /** Fills the pixels that have no class yet from the open rows (all, or those in `ids`): one
   * undo step. What was painted stays. */
  accept(ids = null) {
    const rows = this.open().filter((s) => ids === null || ids.includes(s.id));
    if (!rows.length || !this.proposal) return false;
    const take = new Uint8Array(256);
    for (const s of rows) take[this.ed.classById(s.class_id).index] = 1;
    const { values } = this.mask;
    const proposed = this.proposal.values;
    const { width } = this;
    let x0 = Infinity;
    let y0 = Infinity;
    let x1 = -1;
    let y1 = -1;
    for (let i = 0; i < proposed.length; i++) {
      const v = proposed[i];
      if (v === IGNORE || !take[v] || values[i] !== IGNORE) continue;
      values[i] = v;
      const x = i % width;
      const y = (i - x) / width;
      if (x < x0) x0 = x;
      if (x > x1) x1 = x;
      if (y < y0) y0 = y;
      y1 = y;
    }
    const chosen = rows.map((s) => s.id);
    this.decide(chosen, "accepted");
    if (x1 >= 0) this.mask.grow(x0, y0, x1 + 1, y1 + 1);
    if (this.mask.record()) {
      this.mask.steps[this.mask.at - 1].accepted = chosen;
      this.changed();
      this.say(`Accepted ${rows.length === 1 ? this.ed.nameOf(rows[0].class_id) : "the model's mask"}.`);
    } else {
      this.say("Every pixel it covers is painted already: nothing to fill.");
    }
    this.app.renderer.request();
    return true;
  }

  discard(ids = null) {
    const rows = this.open().filter((s) => ids === null || ids.includes(s.id));
    if (!rows.length) return false;
    this.decide(rows.map((s) => s.id), "rejected");
    this.say(rows.length === 1 && ids ? `Discarded ${this.ed.nameOf(rows[0].class_id)}.` : "Discarded the model's mask.");
    return true;
  }

  /** The open rows as a striped layer, and their list with Accept / Discard per class. */
  renderProposal() {
    const rows = this.open();
    this.proposal = null;
    if (rows.length) {
      const values = new Uint8Array(this.width * this.height).fill(IGNORE);
      for (const s of rows) {
        if (!rleFill(s.data, values, this.width, this.height, this.ed.classById(s.class_id).index)) {
          this.say("A suggested mask is not of this image's size; ask the model again.", true);
          this.rows = [];
          return this.renderProposal();
        }
      }
      const [strong, faint] = PROPOSAL_ALPHA.map((alpha) => {
        const lut = new Uint32Array(256);
        for (const c of this.ed.classes) if (c.index < 255) lut[c.index] = hexPacked(c.color, alpha);
        return lut;
      });
      const layer = new PixelLayer(this.width, this.height, values, strong, faint);
      layer.markAll();
      this.proposal = { values, layer };
    }
    if (this.el.proposal) this.el.proposal.hidden = !rows.length;
    const list = this.el.list;
    if (list) {
      list.replaceChildren();
      for (const s of rows) {
        const li = document.createElement("li");
        li.dataset.suggestionId = s.id;
        const swatch = document.createElement("span");
        swatch.className = "swatch";
        swatch.style.background = this.ed.colorOf(s.class_id);
        const name = document.createElement("span");
        const share = s.confidence * 100;
        name.textContent = `${this.ed.nameOf(s.class_id)} ${share.toFixed(share < 1 ? 2 : 1)}%`;
        name.title = `Share of the image's pixels, from ${s.model}`;
        const yes = document.createElement("button");
        yes.type = "button";
        yes.className = "small";
        yes.textContent = "Accept";
        yes.dataset.testid = "mask-suggestion-accept";
        yes.addEventListener("click", () => this.accept([s.id]));
        const no = document.createElement("button");
        no.type = "button";
        no.className = "small secondary";
        no.textContent = "Discard";
        no.addEventListener("click", () => this.discard([s.id]));
        li.append(swatch, name, yes, no);
        list.append(li);
      }
    }
    this.app.renderer.request();
  }

  say(text, error = false) {
    const el = this.el.message;
    if (!el) return;
    el.textContent = text;
    el.hidden = !text;
    el.classList.toggle("error", error);
  }

  // --- saving -------------------------------------------------------------------------------

  /** The Saver's PUT: the mask as a PNG; the revision, and the suggestions this save decides,
   * in the query. Answers as Api.request. */
  async put(url, { revision, accepted, rejected }) {
    let response;
    const query = new URLSearchParams({ revision: String(revision) });
    if (accepted.length) query.set("accepted", accepted.join(","));
    if (rejected.length) query.set("rejected", rejected.join(","));
    this.sent = [...accepted, ...rejected];
    try {
      const png = await pngEncodeGrey(this.mask.values, this.width, this.height);
      response = await fetch(`${url}?${query}`, {
        method: "PUT",
        credentials: "same-origin",
        headers: { "Content-Type": "image/png", Accept: "application/json", "X-CSRFToken": this.app.api.csrfToken },
        body: png,
      });
    } catch {
      return { ok: false, status: 0, data: { detail: "Could not reach the server. Check the connection." } };
    }
    let data;
    try {
      data = await response.json();
    } catch {
      data = { detail: `The server answered ${response.status}.` };
    }
    return { ok: response.ok, status: response.status, data };
  }

  // --- page and keys --------------------------------------------------------------------------

  bind() {
    const { el } = this;
    el.opacity?.addEventListener("input", () => this.setOpacity(Number(el.opacity.value) / 100));
    if (el.brush) el.brush.textContent = String(this.brush);
    this.ed.on((what) => what === "classes" && this.app.refreshHint());
    for (const btn of this.app.root.querySelectorAll("[data-region]")) {
      btn.addEventListener("click", () => (btn.dataset.region === "accept" ? this.acceptRegion() : this.discardRegion()));
    }
    el.suggest?.addEventListener("click", () => this.suggest());
    for (const btn of this.app.root.querySelectorAll("[data-proposal]")) {
      btn.addEventListener("click", () => (btn.dataset.proposal === "accept" ? this.accept() : this.discard()));
    }
  }

  /** Keys of the mask, before the tool's own and the editor's; true when taken. */
  key(event) {
    const key = event.key;
    const lower = key.length === 1 ? key.toLowerCase() : key;
    const mod = event.ctrlKey || event.metaKey;
    if (mod && lower === "s" && !event.altKey) {
      if (this.ed.canEdit) this.ed.saver.flush();
      return true; // never the browser's "save page"
    }
    if (mod || event.altKey || !this.ed.canEdit) return false;
    if (this.suggestion && key === "Enter") return this.acceptRegion();
    if (this.suggestion && (lower === "x" || key === "Escape")) return this.discardRegion();
    // Not while a stroke, a box or a polygon fill is under way: Enter and Esc are theirs then.
    if (this.proposal && this.busyFree() && key === "Enter") return this.accept();
    if (this.proposal && this.busyFree() && key === "Escape") return this.discard();
    if (key === "[") return this.setBrush(-1) || true;
    if (key === "]") return this.setBrush(1) || true;
    const tool = { b: "brush", e: "eraser", p: "fill", s: "smart" }[lower];
    if (tool) {
      this.app.setTool(tool);
      return true;
    }
    return false;
  }

  draw(ctx, view) {
    if (!this.ready) return;
    this.layer.draw(ctx, view, 0, this.opacity);
    this.proposal?.layer.draw(ctx, view, 0, 1);
    const s = this.suggestion;
    if (!s) return;
    ctx.beginPath();
    ctx.moveTo(view.toScreenX(s.points[0][0]), view.toScreenY(s.points[0][1]));
    for (const [x, y] of s.points.slice(1)) ctx.lineTo(view.toScreenX(x), view.toScreenY(y));
    ctx.closePath();
    ctx.globalAlpha = 0.35;
    ctx.fillStyle = this.classColour();
    ctx.fill();
    ctx.globalAlpha = 1;
    ctx.setLineDash([6, 4]);
    ctx.lineWidth = 2;
    ctx.strokeStyle = "#fff";
    ctx.stroke();
    ctx.setLineDash([]);
  }

  readout() {}

  /** window.kestrelMasks: read-only state for tests and the bench. */
  expose() {
    return Object.freeze({
      ready: () => this.ready,
      task: () => "semantic",
      brush: () => this.brush,
      opacity: () => this.opacity,
      canUndo: () => this.mask.canUndo(),
      canRedo: () => this.mask.canRedo(),
      /** Pixels per value, as {value: count}, values present only. */
      histogram: () => Object.fromEntries([...this.mask.histogram()].map((n, v) => [v, n]).filter(([, n]) => n)),
      at: (x, y) => this.mask.values[Math.floor(y) * this.width + Math.floor(x)],
      suggestion: () => (this.suggestion ? this.suggestion.points.map((p) => p.slice()) : null),
      /** The model's open mask suggestions: [{id, class_id, share}]. */
      proposal: () => this.open().map((s) => ({ id: s.id, class_id: s.class_id, share: s.confidence })),
      /** The class index the open suggestions propose at (x, y), 255 for none. */
      proposedAt: (x, y) => (this.proposal ? this.proposal.values[Math.floor(y) * this.width + Math.floor(x)] : IGNORE),
    });
  }
}

// --- the depth review ---------------------------------------------------------------------------

class DepthPixels {
  constructor(app) {
    this.app = app;
    this.ed = app.editor;
    this.width = this.ed.width;
    this.height = this.ed.height;
    this.scale = Number(this.ed.data.dataset.depth_scale) || 1000;
    this.offset = this.width + depthGap(this.width);
    this.values = null;
    this.layer = null;
    this.hover = null;
    this.ready = false;
    this.tools = { select: new ViewTool(app, this) };
    this.tool = this.tools.select;
    const root = app.root;
    this.el = {
      value: $(root, "[data-testid=depth-value]"),
      at: $(root, "[data-testid=depth-at]"),
      range: $(root, "[data-testid=depth-range]"),
    };
  }

  async load() {
    const answer = await pixelsFetch(this.ed.data.pixels_url);
    if (answer.error) {
      this.ed.emit("message", { text: `Could not load the depth map: ${answer.error}`, error: true });
      return false;
    }
    if (!answer.values) {
      if (this.el.range) this.el.range.textContent = "no depth map stored for this image";
    } else if (answer.width !== this.width || answer.height !== this.height || !(answer.values instanceof Uint16Array)) {
      this.ed.emit("message", { text: "The stored depth map does not fit this image.", error: true });
      return false;
    } else {
      this.values = answer.values;
      const { lut, lo, hi } = this.colours(answer.values);
      this.layer = new PixelLayer(this.width, this.height, this.values, lut);
      this.layer.markAll();
      if (this.el.range) this.el.range.textContent = lo ? `${this.metres(lo)} (red) to ${this.metres(hi)} (blue)` : "no readings";
    }
    this.ready = true;
    this.app.renderer.request();
    return true;
  }

  /** Near warm, far cool, across this map's own range; no reading (0) transparent. */
  colours(values) {
    let lo = 65535;
    let hi = 0;
    for (let i = 0; i < values.length; i++) {
      const v = values[i];
      if (v && v < lo) lo = v;
      if (v > hi) hi = v;
    }
    const lut = new Uint32Array(65536);
    if (!hi) return { lut, lo: 0, hi: 0 };
    const span = Math.max(1, hi - lo);
    for (let v = lo; v <= hi; v++) {
      const [r, g, b] = turbo(1 - (v - lo) / span);
      lut[v] = packed(r, g, b, 255);
    }
    for (let v = 1; v < lo; v++) lut[v] = lut[lo];
    for (let v = hi + 1; v < 65536; v++) lut[v] = lut[hi];
    return { lut, lo, hi };
  }

  metres(raw) {
    return `${(raw / this.scale).toFixed(3)} m`;
  }

  /** The reading under the pointer, over the image or over the map beside it. */
  readout(p) {
    let hover = null;
    if (p && this.values) {
      const x = p.x >= this.offset ? p.x - this.offset : p.x;
      if (x >= 0 && x < this.width && p.y >= 0 && p.y < this.height) hover = { x: Math.floor(x), y: Math.floor(p.y) };
    }
    this.hover = hover;
    if (this.el.value) {
      if (!hover) this.el.value.textContent = "—";
      else {
        const raw = this.values[hover.y * this.width + hover.x];
        this.el.value.textContent = raw ? this.metres(raw) : "no reading";
        this.el.value.title = `stored value ${raw} (${this.scale} per metre)`;
      }
    }
    if (this.el.at) this.el.at.textContent = hover ? `at x ${hover.x}, y ${hover.y}` : "";
    this.app.renderer.request();
  }

  key() {
    return false;
  }

  draw(ctx, view) {
    if (!this.ready) return;
    if (this.layer) this.layer.draw(ctx, view, this.offset, 1);
    else {
      ctx.fillStyle = "#33363a";
      ctx.fillRect(view.toScreenX(this.offset), view.toScreenY(0), this.width * view.scale, this.height * view.scale);
    }
    const h = this.hover;
    if (!h) return;
    for (const dx of [0, this.offset]) {
      const x = view.toScreenX(h.x + 0.5 + dx);
      const y = view.toScreenY(h.y + 0.5);
      ctx.beginPath();
      ctx.moveTo(x - 7, y);
      ctx.lineTo(x + 7, y);
      ctx.moveTo(x, y - 7);
      ctx.lineTo(x, y + 7);
      ctx.lineWidth = 3;
      ctx.strokeStyle = "rgba(0,0,0,.7)";
      ctx.stroke();
      ctx.lineWidth = 1.5;
      ctx.strokeStyle = "#fff";
      ctx.stroke();
    }
  }

  expose() {
    return Object.freeze({
      ready: () => this.ready,
      task: () => "depth",
      /** The raw stored value at image pixel (x, y), or null without a map. */
      at: (x, y) => (this.values ? this.values[Math.floor(y) * this.width + Math.floor(x)] : null),
      offset: () => this.offset,
    });
  }
}

/** The per-pixel part of the editor for a semantic or depth dataset; null for other tasks. */
export function pixelEditor(app) {
  const task = app.data.dataset.task;
  const pixels = task === "semantic" ? new SemanticPixels(app) : task === "depth" ? new DepthPixels(app) : null;
  if (pixels) window.kestrelMasks = pixels.expose();
  return pixels;
}
