// Zoom, pan and the image ↔ screen transform, and drawing the whole scene on one canvas.
// Screen = image pixels × scale + (x, y), in CSS pixels of the canvas. Shapes are drawn in
// batches, one path per class, with the transform doing the arithmetic; nothing is allocated
// per shape per frame, and a frame is drawn only when something changed.

import { boxCorners, keypointCount, keypointPlaced, labelHandles, obbRotateHandle } from "./shapes.js";

const MIN_ZOOM = 0.02;
const MAX_ZOOM = 40;
const PREVIEW_SIZE = 2048;
export const ROTATE_HANDLE_PX = 28;
const BACKGROUND = "#26282b";

export class View {
  constructor(width, height) {
    this.width = width;
    this.height = height;
    this.scale = 1;
    this.x = 0;
    this.y = 0;
    this.cssWidth = 1;
    this.cssHeight = 1;
  }

  resize(cssWidth, cssHeight) {
    this.cssWidth = Math.max(1, cssWidth);
    this.cssHeight = Math.max(1, cssHeight);
  }

  fit() {
    const pad = 24;
    this.scale = Math.min((this.cssWidth - pad) / this.width, (this.cssHeight - pad) / this.height);
    this.scale = Math.max(MIN_ZOOM, this.scale);
    this.x = (this.cssWidth - this.width * this.scale) / 2;
    this.y = (this.cssHeight - this.height * this.scale) / 2;
  }

  /** Zooms by `factor`, keeping the image point under (sx, sy) where it is. */
  zoomAt(sx, sy, factor) {
    const scale = Math.min(MAX_ZOOM, Math.max(MIN_ZOOM, this.scale * factor));
    const ix = (sx - this.x) / this.scale;
    const iy = (sy - this.y) / this.scale;
    this.scale = scale;
    this.x = sx - ix * scale;
    this.y = sy - iy * scale;
  }

  panBy(dx, dy) {
    this.x += dx;
    this.y += dy;
  }

  toImageX(sx) {
    return (sx - this.x) / this.scale;
  }

  toImageY(sy) {
    return (sy - this.y) / this.scale;
  }

  toScreenX(ix) {
    return ix * this.scale + this.x;
  }

  toScreenY(iy) {
    return iy * this.scale + this.y;
  }
}

/** A smaller copy of a big image, drawn instead of it when zoomed out (much cheaper to scale). */
function makePreview(source, width, height) {
  const ratio = PREVIEW_SIZE / Math.max(width, height);
  if (ratio >= 0.75) return null;
  const canvas = document.createElement("canvas");
  canvas.width = Math.round(width * ratio);
  canvas.height = Math.round(height * ratio);
  const ctx = canvas.getContext("2d");
  ctx.imageSmoothingQuality = "high";
  ctx.drawImage(source, 0, 0, canvas.width, canvas.height);
  return { source: canvas, ratio };
}

export class Renderer {
  /** scene: {view, width, height, dims, skeleton, colorOf(classId), nameOf(classId),
   *  labels(), groups(), suggestions(), selection(), hover(), preview(ctx, view)} */
  constructor(canvas, scene) {
    this.canvas = canvas;
    this.ctx = canvas.getContext("2d");
    this.scene = scene;
    this.image = null;
    this.preview = null;
    this.imageError = "";
    this.dirty = true;
    this.frame = 0;
    this.dpr = window.devicePixelRatio || 1;
    // How long the last frames took to draw, in ms (a fixed ring: bench/annotate_render.py).
    this.drawTimes = new Float64Array(512);
    this.drawCount = 0;
  }

  /** img: the loaded <img>; bitmap: the same decoded once (drawing from it is cheaper). */
  setImage(img, bitmap) {
    this.image = img;
    this.source = bitmap || img;
    this.preview = makePreview(this.source, img.naturalWidth, img.naturalHeight);
    this.request();
  }

  request() {
    this.dirty = true;
    if (!this.frame) this.frame = requestAnimationFrame(() => this.draw());
  }

  resize(cssWidth, cssHeight) {
    this.dpr = window.devicePixelRatio || 1;
    this.canvas.width = Math.round(cssWidth * this.dpr);
    this.canvas.height = Math.round(cssHeight * this.dpr);
    this.request();
  }

  draw() {
    this.frame = 0;
    if (!this.dirty) return;
    this.dirty = false;
    const started = performance.now();
    const { ctx, dpr, scene } = this;
    const view = scene.view;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.fillStyle = BACKGROUND;
    ctx.fillRect(0, 0, view.cssWidth, view.cssHeight);
    this.drawImage();
    this.drawLabels();
    this.drawSuggestions();
    this.drawSelection();
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    scene.preview(ctx, view);
    this.drawTimes[this.drawCount % this.drawTimes.length] = performance.now() - started;
    this.drawCount += 1;
  }

  drawImage() {
    const { ctx, scene } = this;
    const view = scene.view;
    const { width, height } = scene;
    const sx0 = view.toScreenX(0);
    const sy0 = view.toScreenY(0);
    if (!this.image) {
      ctx.fillStyle = "#33363a";
      ctx.fillRect(sx0, sy0, width * view.scale, height * view.scale);
      ctx.fillStyle = "#c9ccd1";
      ctx.font = "14px system-ui, sans-serif";
      ctx.fillText(this.imageError || "Loading image…", sx0 + 12, sy0 + 24);
      return;
    }
    // Only the part of the image on screen is drawn.
    const ix0 = Math.max(0, view.toImageX(0));
    const iy0 = Math.max(0, view.toImageY(0));
    const ix1 = Math.min(width, view.toImageX(view.cssWidth));
    const iy1 = Math.min(height, view.toImageY(view.cssHeight));
    if (ix1 <= ix0 || iy1 <= iy0) return;
    // Screen pixels per pixel of the file, against the preview's pixels per pixel of the file.
    const density = (view.scale * width) / this.image.naturalWidth;
    const usePreview = this.preview && density <= this.preview.ratio * 1.2;
    const source = usePreview ? this.preview.source : this.source;
    // Image pixels of the labels may differ from the file's (a stored size vs. EXIF-rotated).
    const rx = (usePreview ? this.preview.source.width : this.image.naturalWidth) / width;
    const ry = (usePreview ? this.preview.source.height : this.image.naturalHeight) / height;
    ctx.imageSmoothingEnabled = view.scale < 3;
    ctx.drawImage(
      source,
      ix0 * rx, iy0 * ry, (ix1 - ix0) * rx, (iy1 - iy0) * ry,
      view.toScreenX(ix0), view.toScreenY(iy0), (ix1 - ix0) * view.scale, (iy1 - iy0) * view.scale,
    );
  }

  /** Sets the transform so that path coordinates are the labels' normalised ones. */
  normalisedTransform() {
    const { dpr, scene } = this;
    const v = scene.view;
    this.ctx.setTransform(dpr * v.scale * scene.width, 0, 0, dpr * v.scale * scene.height, dpr * v.x, dpr * v.y);
  }

  screenTransform() {
    this.ctx.setTransform(this.dpr, 0, 0, this.dpr, 0, 0);
  }

  pathLabel(label) {
    const ctx = this.ctx;
    const d = label.data;
    if (label.kind === "box" || label.kind === "keypoints") {
      ctx.rect(d[0] - d[2] / 2, d[1] - d[3] / 2, d[2], d[3]);
    } else if (label.kind === "polygon" || label.kind === "obb") {
      if (d.length < 4) return;
      ctx.moveTo(d[0], d[1]);
      for (let i = 2; i + 1 < d.length; i += 2) ctx.lineTo(d[i], d[i + 1]);
      ctx.closePath();
    }
  }

  drawLabels() {
    const { ctx, scene } = this;
    const labels = scene.labels();
    const hover = scene.hover();
    for (const [classId, indices] of scene.groups()) {
      const color = scene.colorOf(classId);
      this.normalisedTransform();
      ctx.beginPath();
      for (const i of indices) this.pathLabel(labels[i]);
      this.screenTransform();
      ctx.globalAlpha = 0.12;
      ctx.fillStyle = color;
      ctx.fill();
      ctx.globalAlpha = 1;
      ctx.lineWidth = 1.5;
      ctx.strokeStyle = color;
      ctx.stroke();
    }
    if (hover >= 0 && hover < labels.length && labels[hover].kind !== "tag") {
      this.normalisedTransform();
      ctx.beginPath();
      this.pathLabel(labels[hover]);
      this.screenTransform();
      ctx.lineWidth = 3;
      ctx.strokeStyle = scene.colorOf(labels[hover].class_id);
      ctx.stroke();
    }
    for (let i = 0; i < labels.length; i++) {
      if (labels[i].kind === "keypoints") this.drawKeypoints(labels[i], -1);
    }
  }

  drawKeypoints(label, selectedPoint) {
    const { ctx, scene } = this;
    const view = scene.view;
    const dims = scene.dims;
    const d = label.data;
    const n = keypointCount(label, dims);
    const color = scene.colorOf(label.class_id);
    const px = (i) => view.toScreenX(d[4 + i * dims] * scene.width);
    const py = (i) => view.toScreenY(d[5 + i * dims] * scene.height);
    const edges = scene.skeleton ? scene.skeleton.edges : [];
    ctx.beginPath();
    for (const [a, b] of edges) {
      if (a >= n || b >= n || !keypointPlaced(d, a, dims) || !keypointPlaced(d, b, dims)) continue;
      ctx.moveTo(px(a), py(a));
      ctx.lineTo(px(b), py(b));
    }
    ctx.lineWidth = 2;
    ctx.strokeStyle = color;
    ctx.stroke();
    for (let i = 0; i < n; i++) {
      const v = dims === 3 ? d[6 + i * dims] : keypointPlaced(d, i, dims) ? 2 : 0;
      if (!v && !d[4 + i * dims] && !d[5 + i * dims]) continue;
      ctx.beginPath();
      ctx.arc(px(i), py(i), i === selectedPoint ? 6 : 4, 0, Math.PI * 2);
      ctx.fillStyle = v === 2 ? color : v === 1 ? "#ffffff" : "rgba(0,0,0,0)";
      ctx.fill();
      ctx.lineWidth = i === selectedPoint ? 2.5 : 1.5;
      ctx.strokeStyle = v === 0 ? "#9aa0a6" : v === 1 ? color : "#111";
      ctx.stroke();
    }
  }

  drawSuggestions() {
    const { ctx, scene } = this;
    const suggestions = scene.suggestions();
    if (!suggestions.length) return;
    const view = scene.view;
    const picked = scene.selection().suggestion;
    ctx.setLineDash([6, 4]);
    ctx.font = "12px system-ui, sans-serif";
    for (const s of suggestions) {
      const color = scene.colorOf(s.class_id);
      this.normalisedTransform();
      ctx.beginPath();
      this.pathLabel(s);
      this.screenTransform();
      ctx.lineWidth = s.id === picked ? 3 : 1.5;
      ctx.strokeStyle = color;
      ctx.stroke();
      if (s.id === picked) {
        ctx.globalAlpha = 0.2;
        ctx.fillStyle = color;
        ctx.fill();
        ctx.globalAlpha = 1;
      }
      const [lx, ly] = labelAnchor(s, scene.width, scene.height);
      const text = `${scene.nameOf(s.class_id)} ${Math.round(s.confidence * 100)}%`;
      const tx = view.toScreenX(lx);
      const ty = view.toScreenY(ly);
      const tw = ctx.measureText(text).width + 8;
      ctx.fillStyle = "rgba(20,20,22,.75)";
      ctx.fillRect(tx, ty - 16, tw, 16);
      ctx.fillStyle = "#fff";
      ctx.fillText(text, tx + 4, ty - 4);
    }
    ctx.setLineDash([]);
  }

  drawSelection() {
    const { ctx, scene } = this;
    const sel = scene.selection();
    const labels = scene.labels();
    if (sel.index < 0 || sel.index >= labels.length) return;
    const label = labels[sel.index];
    if (label.kind === "tag") return;
    const view = scene.view;
    const color = scene.colorOf(label.class_id);
    this.normalisedTransform();
    ctx.beginPath();
    this.pathLabel(label);
    this.screenTransform();
    ctx.lineWidth = 4;
    ctx.strokeStyle = "rgba(255,255,255,.85)";
    ctx.stroke();
    ctx.lineWidth = 2;
    ctx.strokeStyle = color;
    ctx.stroke();
    if (label.kind === "keypoints") this.drawKeypoints(label, sel.point);
    const handles = labelHandles(label, scene.width, scene.height, scene.dims, ROTATE_HANDLE_PX / view.scale);
    if (label.kind === "obb") {
      const r = obbRotateHandle(label.data, scene.width, scene.height, ROTATE_HANDLE_PX / view.scale);
      ctx.beginPath();
      ctx.moveTo(view.toScreenX(r.fromX), view.toScreenY(r.fromY));
      ctx.lineTo(view.toScreenX(r.x), view.toScreenY(r.y));
      ctx.lineWidth = 1.5;
      ctx.strokeStyle = "#fff";
      ctx.stroke();
    }
    for (const hd of handles) {
      if (hd.type === "point") continue;
      const x = view.toScreenX(hd.x);
      const y = view.toScreenY(hd.y);
      ctx.beginPath();
      if (hd.type === "box" || hd.type === "corner") ctx.rect(x - 4, y - 4, 8, 8);
      else ctx.arc(x, y, hd.type === "rotate" ? 6 : hd.index === sel.vertex ? 6 : 4, 0, Math.PI * 2);
      ctx.fillStyle = hd.type === "vertex" && hd.index === sel.vertex ? color : "#fff";
      ctx.fill();
      ctx.lineWidth = 1.5;
      ctx.strokeStyle = "#111";
      ctx.stroke();
    }
    const [lx, ly] = labelAnchor(label, scene.width, scene.height);
    ctx.font = "600 12px system-ui, sans-serif";
    const text = scene.nameOf(label.class_id);
    const tx = view.toScreenX(lx);
    const ty = view.toScreenY(ly) - 8;
    ctx.fillStyle = color;
    ctx.fillRect(tx, ty - 15, ctx.measureText(text).width + 8, 16);
    ctx.fillStyle = "#fff";
    ctx.fillText(text, tx + 4, ty - 3);
  }
}

/** Top-left of a shape in image pixels, where its caption goes. */
function labelAnchor(label, width, height) {
  if (label.kind === "box" || label.kind === "keypoints") {
    const { x0, y0 } = boxCorners(label.data, width, height);
    return [x0, y0];
  }
  let x = Infinity;
  let y = Infinity;
  for (let i = 0; i + 1 < label.data.length; i += 2) {
    x = Math.min(x, label.data[i] * width);
    y = Math.min(y, label.data[i + 1] * height);
  }
  return [x, y];
}
