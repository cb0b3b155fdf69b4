// Shape geometry for the labelling editor: hit-testing, handles, edits and clipping, per kind.
// Labels keep the server's form ({kind, class_id, data}, coordinates normalised 0..1 of the
// image) so saving is a plain copy; the functions here take the image size (w, h) in pixels and
// work in image pixels, where distances and angles mean what they look like.

export const KINDS_WITH_BOX = new Set(["box", "keypoints"]);

const clamp = (v, lo, hi) => (v < lo ? lo : v > hi ? hi : v);
export const clamp01 = (v) => clamp(v, 0, 1);

export function cloneLabel(label) {
  return { kind: label.kind, class_id: label.class_id, data: label.data.slice() };
}

export function cloneLabels(labels) {
  return labels.map(cloneLabel);
}

// --- boxes ([cx, cy, w, h] at the start of box and keypoints data) --------------------------

export function boxCorners(data, w, h) {
  const x0 = (data[0] - data[2] / 2) * w;
  const y0 = (data[1] - data[3] / 2) * h;
  return { x0, y0, x1: x0 + data[2] * w, y1: y0 + data[3] * h };
}

/** A box's data from two corners in image pixels, clipped to the image. */
export function boxFromCorners(ax, ay, bx, by, w, h) {
  const x0 = clamp(Math.min(ax, bx), 0, w);
  const x1 = clamp(Math.max(ax, bx), 0, w);
  const y0 = clamp(Math.min(ay, by), 0, h);
  const y1 = clamp(Math.max(ay, by), 0, h);
  return [(x0 + x1) / 2 / w, (y0 + y1) / 2 / h, (x1 - x0) / w, (y1 - y0) / h];
}

// The eight resize handles, named by the edges they move.
const BOX_HANDLES = ["nw", "n", "ne", "e", "se", "s", "sw", "w"];

function boxHandlePoints(data, w, h) {
  const { x0, y0, x1, y1 } = boxCorners(data, w, h);
  const mx = (x0 + x1) / 2;
  const my = (y0 + y1) / 2;
  const at = { nw: [x0, y0], n: [mx, y0], ne: [x1, y0], e: [x1, my], se: [x1, y1], s: [mx, y1], sw: [x0, y1], w: [x0, my] };
  return BOX_HANDLES.map((name) => ({ type: "box", name, x: at[name][0], y: at[name][1] }));
}

/** Box data after dragging handle `name` to (px, py); the opposite edges stay put. */
export function boxResize(data, name, px, py, w, h) {
  let { x0, y0, x1, y1 } = boxCorners(data, w, h);
  px = clamp(px, 0, w);
  py = clamp(py, 0, h);
  if (name.includes("w")) x0 = px;
  if (name.includes("e")) x1 = px;
  if (name.includes("n")) y0 = py;
  if (name.includes("s")) y1 = py;
  return boxFromCorners(x0, y0, x1, y1, w, h);
}

// --- points of polygons, obbs and keypoints ------------------------------------------------

/** [[x, y], ...] in image pixels for a polygon's or obb's data. */
export function ringPoints(data, w, h) {
  const out = [];
  for (let i = 0; i + 1 < data.length; i += 2) out.push([data[i] * w, data[i + 1] * h]);
  return out;
}

export function keypointDims(keypointShape) {
  return keypointShape && keypointShape[1] === 2 ? 2 : 3;
}

export function keypointCount(label, dims) {
  return Math.floor((label.data.length - 4) / dims);
}

/** Whether keypoint i is placed: v > 0 with visibility, or not (0, 0) without. */
export function keypointPlaced(data, i, dims) {
  const o = 4 + i * dims;
  if (dims === 3) return data[o + 2] > 0;
  return data[o] !== 0 || data[o + 1] !== 0;
}

/** New keypoints data: a box with n unplaced points. */
export function keypointsEmpty(box, n, dims) {
  const data = box.slice(0, 4);
  for (let i = 0; i < n * dims; i++) data.push(0);
  return data;
}

// --- area, bounds, hit-testing --------------------------------------------------------------

function ringArea(pts) {
  let a = 0;
  for (let i = 0, j = pts.length - 1; i < pts.length; j = i++) {
    a += (pts[j][0] + pts[i][0]) * (pts[j][1] - pts[i][1]);
  }
  return Math.abs(a / 2);
}

export function labelArea(label, w, h) {
  if (KINDS_WITH_BOX.has(label.kind)) return label.data[2] * w * label.data[3] * h;
  if (label.kind === "polygon" || label.kind === "obb") return ringArea(ringPoints(label.data, w, h));
  return 0;
}

function pointInRing(pts, x, y) {
  let inside = false;
  for (let i = 0, j = pts.length - 1; i < pts.length; j = i++) {
    const [xi, yi] = pts[i];
    const [xj, yj] = pts[j];
    if (yi > y !== yj > y && x < ((xj - xi) * (y - yi)) / (yj - yi) + xi) inside = !inside;
  }
  return inside;
}

export function segmentDistance(px, py, ax, ay, bx, by) {
  const dx = bx - ax;
  const dy = by - ay;
  const len2 = dx * dx + dy * dy;
  const t = len2 ? clamp(((px - ax) * dx + (py - ay) * dy) / len2, 0, 1) : 0;
  return Math.hypot(px - (ax + t * dx), py - (ay + t * dy));
}

/** Whether (x, y) in image pixels is on the label, within tol pixels of its outline. */
export function labelHit(label, x, y, tol, w, h) {
  if (KINDS_WITH_BOX.has(label.kind)) {
    const { x0, y0, x1, y1 } = boxCorners(label.data, w, h);
    return x >= x0 - tol && x <= x1 + tol && y >= y0 - tol && y <= y1 + tol;
  }
  if (label.kind === "polygon" || label.kind === "obb") {
    const pts = ringPoints(label.data, w, h);
    if (pts.length < 2) return false;
    if (pointInRing(pts, x, y)) return true;
    for (let i = 0, j = pts.length - 1; i < pts.length; j = i++) {
      if (segmentDistance(x, y, pts[j][0], pts[j][1], pts[i][0], pts[i][1]) <= tol) return true;
    }
  }
  return false;
}

/** Index of the label under (x, y): the smallest one there, so nested shapes stay reachable. */
export function hitTest(labels, x, y, tol, w, h) {
  let best = -1;
  let bestArea = Infinity;
  for (let i = 0; i < labels.length; i++) {
    const label = labels[i];
    if (label.kind === "tag" || !labelHit(label, x, y, tol, w, h)) continue;
    const area = labelArea(label, w, h);
    if (area < bestArea) {
      best = i;
      bestArea = area;
    }
  }
  return best;
}

// --- handles --------------------------------------------------------------------------------

/** Where an obb's rotate handle sits: beyond the middle of its first edge, `offset` px out. */
export function obbRotateHandle(data, w, h, offset) {
  const p = ringPoints(data, w, h);
  const cx = (p[0][0] + p[1][0] + p[2][0] + p[3][0]) / 4;
  const cy = (p[0][1] + p[1][1] + p[2][1] + p[3][1]) / 4;
  const mx = (p[0][0] + p[1][0]) / 2;
  const my = (p[0][1] + p[1][1]) / 2;
  const len = Math.hypot(mx - cx, my - cy) || 1;
  return { x: mx + ((mx - cx) / len) * offset, y: my + ((my - cy) / len) * offset, fromX: mx, fromY: my };
}

/**
 * The handles of a label, in image pixels: {type, name|index, x, y}. `rotateOffset` is the
 * distance of an obb's rotate handle in image pixels (it is a fixed distance on screen).
 */
export function labelHandles(label, w, h, dims, rotateOffset) {
  if (label.kind === "box") return boxHandlePoints(label.data, w, h);
  if (label.kind === "polygon") {
    return ringPoints(label.data, w, h).map(([x, y], index) => ({ type: "vertex", index, x, y }));
  }
  if (label.kind === "obb") {
    const corners = ringPoints(label.data, w, h).map(([x, y], index) => ({ type: "corner", index, x, y }));
    const r = obbRotateHandle(label.data, w, h, rotateOffset);
    corners.push({ type: "rotate", x: r.x, y: r.y });
    return corners;
  }
  if (label.kind === "keypoints") {
    const out = boxHandlePoints(label.data, w, h);
    const n = keypointCount(label, dims);
    for (let i = 0; i < n; i++) {
      const x = label.data[4 + i * dims];
      const y = label.data[5 + i * dims];
      // A point marked "not labelled" keeps its place, so it can be cycled back to visible.
      if (!keypointPlaced(label.data, i, dims) && !x && !y) continue;
      out.push({ type: "point", index: i, x: x * w, y: y * h });
    }
    return out;
  }
  return [];
}

/** The handle within tol pixels of (x, y), points before box handles (they sit on top). */
export function handleAt(handles, x, y, tol) {
  let best = null;
  let bestD = tol;
  for (let i = handles.length - 1; i >= 0; i--) {
    const hd = handles[i];
    const d = Math.hypot(hd.x - x, hd.y - y);
    if (d <= bestD) {
      best = hd;
      bestD = d;
    }
  }
  return best;
}

/** {index, t-point} of the polygon edge within tol pixels of (x, y), or null. */
export function edgeAt(data, x, y, tol, w, h) {
  const pts = ringPoints(data, w, h);
  let best = null;
  let bestD = tol;
  for (let i = 0; i < pts.length; i++) {
    const a = pts[i];
    const b = pts[(i + 1) % pts.length];
    const d = segmentDistance(x, y, a[0], a[1], b[0], b[1]);
    if (d <= bestD) {
      best = i;
      bestD = d;
    }
  }
  return best;
}

// --- edits (each returns new data; the label passed in is not changed) -----------------------

/** Moves a label by (dx, dy) image pixels, held so that it stays wholly inside the image. */
export function labelMove(label, dx, dy, w, h, dims) {
  const data = label.data.slice();
  if (label.kind === "tag") return data;
  let minX = Infinity;
  let minY = Infinity;
  let maxX = -Infinity;
  let maxY = -Infinity;
  const points = [];
  if (KINDS_WITH_BOX.has(label.kind)) {
    const { x0, y0, x1, y1 } = boxCorners(data, w, h);
    minX = x0; minY = y0; maxX = x1; maxY = y1;
    if (label.kind === "keypoints") {
      for (let i = 0; i < keypointCount(label, dims); i++) if (keypointPlaced(data, i, dims)) points.push(4 + i * dims);
    }
  } else {
    for (let i = 0; i + 1 < data.length; i += 2) points.push(i);
  }
  for (const o of points) {
    minX = Math.min(minX, data[o] * w); maxX = Math.max(maxX, data[o] * w);
    minY = Math.min(minY, data[o + 1] * h); maxY = Math.max(maxY, data[o + 1] * h);
  }
  dx = clamp(dx, -minX, w - maxX);
  dy = clamp(dy, -minY, h - maxY);
  if (KINDS_WITH_BOX.has(label.kind)) {
    data[0] += dx / w;
    data[1] += dy / h;
  }
  for (const o of points) {
    data[o] += dx / w;
    data[o + 1] += dy / h;
  }
  return data;
}

export function vertexSet(data, index, x, y, w, h) {
  const out = data.slice();
  out[index * 2] = clamp01(x / w);
  out[index * 2 + 1] = clamp01(y / h);
  return out;
}

export function vertexInsert(data, edgeIndex, x, y, w, h) {
  const out = data.slice();
  out.splice((edgeIndex + 1) * 2, 0, clamp01(x / w), clamp01(y / h));
  return out;
}

/** Data without vertex `index`, or null when that would leave fewer than three. */
export function vertexDelete(data, index) {
  if (data.length / 2 <= 3) return null;
  const out = data.slice();
  out.splice(index * 2, 2);
  return out;
}

export function keypointSet(data, index, x, y, w, h, dims) {
  const out = data.slice();
  const o = 4 + index * dims;
  out[o] = clamp01(x / w);
  out[o + 1] = clamp01(y / h);
  if (dims === 3 && !out[o + 2]) out[o + 2] = 2;
  return out;
}

/** Visibility 2 visible → 1 occluded → 0 not labelled → 2. */
export function keypointCycle(data, index, dims) {
  if (dims !== 3) return data.slice();
  const out = data.slice();
  const o = 4 + index * dims + 2;
  out[o] = out[o] === 2 ? 1 : out[o] === 1 ? 0 : 2;
  return out;
}

// Oriented boxes are edited through (cx, cy, along, across, angle) in image pixels; data is
// always written back as four corners in order.
export function obbParams(data, w, h) {
  const p = ringPoints(data, w, h);
  const cx = (p[0][0] + p[1][0] + p[2][0] + p[3][0]) / 4;
  const cy = (p[0][1] + p[1][1] + p[2][1] + p[3][1]) / 4;
  const angle = Math.atan2(p[1][1] - p[0][1], p[1][0] - p[0][0]);
  return {
    cx, cy, angle,
    along: Math.hypot(p[1][0] - p[0][0], p[1][1] - p[0][1]),
    across: Math.hypot(p[2][0] - p[1][0], p[2][1] - p[1][1]),
  };
}

export function obbFromParams({ cx, cy, along, across, angle }, w, h) {
  const c = Math.cos(angle);
  const s = Math.sin(angle);
  const local = [[-along / 2, -across / 2], [along / 2, -across / 2], [along / 2, across / 2], [-along / 2, across / 2]];
  const out = [];
  for (const [lx, ly] of local) out.push((cx + lx * c - ly * s) / w, (cy + lx * s + ly * c) / h);
  return out;
}

function insideImage(data) {
  return data.every((v) => v >= -1e-9 && v <= 1 + 1e-9);
}

/** Obb data turned so its rotate handle points at (x, y); null if a corner would leave the image. */
export function obbRotate(data, x, y, w, h) {
  const p = obbParams(data, w, h);
  // The handle sits on the side of the first edge, i.e. at angle - 90°.
  p.angle = Math.atan2(y - p.cy, x - p.cx) + Math.PI / 2;
  const out = obbFromParams(p, w, h);
  return insideImage(out) ? out : null;
}

/** Obb data with corner `index` dragged to (x, y), the opposite corner fixed; null if outside. */
export function obbResize(data, index, x, y, w, h) {
  const p = obbParams(data, w, h);
  const pts = ringPoints(data, w, h);
  const fixed = pts[(index + 2) % 4];
  const c = Math.cos(p.angle);
  const s = Math.sin(p.angle);
  // The dragged corner in the box's own frame, relative to the fixed one.
  const lx = (x - fixed[0]) * c + (y - fixed[1]) * s;
  const ly = -(x - fixed[0]) * s + (y - fixed[1]) * c;
  if (Math.abs(lx) < 1 || Math.abs(ly) < 1) return null;
  const mx = fixed[0] + (lx / 2) * c - (ly / 2) * s;
  const my = fixed[1] + (lx / 2) * s + (ly / 2) * c;
  const out = obbFromParams({ cx: mx, cy: my, along: Math.abs(lx), across: Math.abs(ly), angle: p.angle }, w, h);
  return insideImage(out) ? out : null;
}

// --- clipping and validity ------------------------------------------------------------------

/** A polygon as a tight box (for smart polygon and SAM results on a detect dataset). */
export function polygonBounds(data) {
  let x0 = 1, y0 = 1, x1 = 0, y1 = 0;
  for (let i = 0; i + 1 < data.length; i += 2) {
    x0 = Math.min(x0, data[i]); x1 = Math.max(x1, data[i]);
    y0 = Math.min(y0, data[i + 1]); y1 = Math.max(y1, data[i + 1]);
  }
  return [(x0 + x1) / 2, (y0 + y1) / 2, Math.max(0, x1 - x0), Math.max(0, y1 - y0)];
}

/** Whether a finished shape is too small to keep: a box under 1 image px or `minScreen` screen
 *  px on either side, a polygon under three distinct points. */
export function isDegenerate(label, w, h, scale, minScreen = 2) {
  if (KINDS_WITH_BOX.has(label.kind)) {
    const bw = label.data[2] * w;
    const bh = label.data[3] * h;
    return bw < 1 || bh < 1 || bw * scale < minScreen || bh * scale < minScreen;
  }
  if (label.kind === "polygon") {
    const pts = ringPoints(label.data, w, h);
    if (pts.length < 3) return true;
    return ringArea(pts) < 1;
  }
  if (label.kind === "obb") {
    const p = obbParams(label.data, w, h);
    return p.along < 1 || p.across < 1 || p.along * scale < minScreen || p.across * scale < minScreen;
  }
  return false;
}
