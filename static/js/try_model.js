// The try-it page: an image dropped or picked is sent once to the model's predict API with the
// browser session and a low confidence; what comes back is drawn over the image on a canvas,
// and the threshold slider filters it here, without a new request. The image is read as a
// data: URL (the content security policy allows no blob: images). Semantic segmentation is
// drawn from each class's RLE mask as a colour per class, with a legend of pixel shares; depth
// from its 16-bit PNG (decoded here: a canvas would keep only 8 of its bits) as a colour map,
// with min/median/max and the depth under the cursor in metres.
(function () {
  "use strict";

  // Ultralytics' palette, so colours match what its own plots show for the same class index.
  var PALETTE = [
    "#FF3838", "#FF9D97", "#FF701F", "#FFB21D", "#CFD231", "#48F90A", "#92CC17", "#3DDB86",
    "#1A9334", "#00D4BB", "#2C99A8", "#00C2FF", "#344593", "#6473FF", "#0018EC", "#8438FF",
    "#520085", "#CB38FF", "#FF95C8", "#FF37C7",
  ];
  // COCO's 17 keypoints, 1-based as Ultralytics lists its skeleton.
  var SKELETON = [
    [16, 14], [14, 12], [17, 15], [15, 13], [12, 13], [6, 12], [7, 13], [6, 7], [6, 8], [7, 9],
    [8, 10], [9, 11], [2, 3], [1, 2], [1, 3], [2, 4], [3, 5], [4, 6], [5, 7],
  ];
  var KEYPOINT_VISIBLE = 0.5;
  var MAX_CANVAS_SIDE = 2048;
  var SMALL_SIDE = 512; // below this the canvas is shown enlarged, pixels sharp (deploy.css)
  var MASK_ALPHA = 0.45;
  var DEPTH_ALPHA = 0.7;
  var PIXEL_TASKS = { semantic: true, depth: true };

  var root = document.querySelector("[data-try]");
  if (!root) return;
  var $ = function (id) { return document.getElementById(id); };
  var form = $("try-form");
  var fileInput = $("try-file");
  var dropzone = root.querySelector(".dropzone");
  var sizeSelect = $("try-imgsz");
  var runButton = $("try-run");
  var statusLine = $("try-status");
  var resultBox = $("try-result");
  var canvas = $("try-canvas");
  var slider = $("try-threshold");
  var sliderValue = $("try-threshold-value");
  var countLine = $("try-count");
  var list = $("try-results");
  var speedLine = $("try-speed");
  var depthReadout = $("try-depth-readout");
  var depthScale = $("try-depth-scale");

  var predictUrl = root.dataset.predictUrl;
  var task = root.dataset.task;
  var requestConf = root.dataset.conf || "0.05";
  var csrf = root.dataset.csrf || cookie("csrftoken");
  var classNames = [];
  try {
    classNames = JSON.parse($("model-classes").textContent) || [];
  } catch (e) {
    classNames = [];
  }

  var state = {
    file: null,
    image: null, // an HTMLImageElement, loaded from a data: URL
    results: [], // as the API gave them, for the first image
    shape: null, // [height, width] the coordinates refer to
    shown: 0,
    busy: false,
    holding: false, // waiting out a rate limit
    ok: false, // the last answer was a success
    error: "",
    requests: 0,
    pixel: null, // semantic or depth: {kind, layer (a canvas at the answer's size), ...}
  };

  function cookie(name) {
    var match = document.cookie.match(new RegExp("(?:^|; )" + name + "=([^;]*)"));
    return match ? decodeURIComponent(match[1]) : "";
  }

  function threshold() {
    return parseFloat(slider.value);
  }

  function colour(result) {
    var index = typeof result["class"] === "number" ? result["class"] : classNames.indexOf(result.name);
    return PALETTE[(index >= 0 ? index : 0) % PALETTE.length];
  }

  function label(result) {
    return (result.name || "class " + result["class"]) + " " + result.confidence.toFixed(2);
  }

  function setStatus(text, kind) {
    statusLine.textContent = text;
    statusLine.className = "try-status" + (kind ? " " + kind : "");
  }

  // --- reading the image ---------------------------------------------------------------------

  function take(file) {
    if (!file) return;
    if (file.type && file.type.indexOf("image/") !== 0) {
      showError("That is not an image: " + (file.name || "this file") + ".");
      return;
    }
    state.file = file;
    var reader = new FileReader();
    reader.onload = function () {
      var img = new Image();
      img.onload = function () {
        state.image = img;
        state.results = [];
        state.shape = null;
        state.pixel = null;
        draw();
        predict();
      };
      img.onerror = function () {
        showError("The browser cannot show " + (file.name || "this file") + "; is it an image?");
      };
      img.src = reader.result;
    };
    reader.onerror = function () { showError("Could not read " + (file.name || "the file") + "."); };
    reader.readAsDataURL(file);
  }

  // --- asking the model ----------------------------------------------------------------------

  function detailText(body) {
    if (!body || body.detail === undefined) return "";
    if (typeof body.detail === "string") return body.detail;
    if (Array.isArray(body.detail)) {
      return body.detail.map(function (d) { return d.msg || JSON.stringify(d); }).join("; ");
    }
    return JSON.stringify(body.detail);
  }

  // The API's own words when it gave some (they say what to do); otherwise ours, per status.
  function errorMessage(response, body) {
    var detail = detailText(body);
    switch (response.status) {
      case 400:
        return detail || "The image was refused: it could not be read.";
      case 401:
        return "You are logged out: log in again, then retry.";
      case 403:
        return detail || "You may not call this model.";
      case 404:
        return detail || "This model no longer exists.";
      case 413:
        return detail || "The image is too large to send.";
      case 429:
        return detail || "Too many predictions this minute.";
      case 503:
        return detail || "The model server is not available; try again in a moment.";
      default:
        return detail || "The prediction failed (HTTP " + response.status + ").";
    }
  }

  // After a 429 the button waits out Retry-After, counting down, instead of failing again.
  function holdFor(seconds) {
    var left = seconds;
    runButton.disabled = true;
    state.holding = true;
    var tick = function () {
      if (left <= 0) {
        state.holding = false;
        runButton.disabled = false;
        runButton.textContent = "Predict";
        return;
      }
      runButton.textContent = "Predict (" + left + " s)";
      left -= 1;
      window.setTimeout(tick, 1000);
    };
    tick();
  }

  function showError(message) {
    state.error = message;
    setStatus(message, "error");
  }

  function predict() {
    if (!state.file || state.busy || state.holding) return;
    var body = new FormData();
    body.append("file", state.file, state.file.name || "image");
    body.append("conf", requestConf);
    body.append("imgsz", sizeSelect.value);
    state.busy = true;
    state.error = "";
    runButton.disabled = true;
    setStatus("Predicting…", "busy");
    var started = performance.now();
    fetch(predictUrl, {
      method: "POST",
      body: body,
      credentials: "same-origin",
      headers: { "X-CSRFToken": csrf, Accept: "application/json" },
    })
      .then(function (response) {
        return response.text().then(function (text) {
          var parsed = null;
          try {
            parsed = text ? JSON.parse(text) : null;
          } catch (e) {
            parsed = null;
          }
          return { response: response, body: parsed };
        });
      })
      .then(function (answer) {
        state.requests += 1;
        if (!answer.response.ok) {
          // What an earlier image or size found is not shown as if it were this answer.
          state.results = [];
          state.pixel = null;
          speedLine.textContent = "";
          state.ok = false;
          draw();
          showError(errorMessage(answer.response, answer.body));
          var wait = parseInt(answer.response.headers.get("Retry-After") || "", 10);
          if (answer.response.status === 429 && wait > 0) holdFor(wait);
          return;
        }
        var image = answer.body && answer.body.images && answer.body.images[0];
        if (!image) {
          showError("The answer held no image results.");
          return;
        }
        state.shape = image.shape || null;
        showSpeed(image.speed || {}, performance.now() - started);
        if (PIXEL_TASKS[task]) return pixelTake(image);
        state.ok = true;
        state.pixel = null;
        state.results = (image.results || []).filter(function (r) { return typeof r.confidence === "number"; });
        setStatus("");
        draw();
      })
      .catch(function (err) {
        if (window.console) console.error(err);
        state.ok = false;
        state.results = [];
        state.pixel = null;
        showError("Could not reach Kestrel: check your connection and try again.");
      })
      .then(function () {
        state.busy = false;
        if (!state.holding) runButton.disabled = false;
      });
  }

  function showSpeed(speed, roundTrip) {
    var parts = [];
    ["preprocess", "inference", "postprocess"].forEach(function (key) {
      if (typeof speed[key] === "number") parts.push(key + " " + speed[key].toFixed(1) + " ms");
    });
    parts.push("round trip " + Math.round(roundTrip) + " ms");
    speedLine.textContent = parts.join(" · ");
  }

  // --- per-pixel answers (semantic segmentation, depth) ---------------------------------------

  // A semantic answer: one row per class present, its mask as COCO's uncompressed RLE (runs
  // down the columns, starting with a run of 0s). Every class is painted on one layer at the
  // answer's size, which draw() lays over the photo.
  function semanticLayer(rows, shape) {
    var h = shape[0];
    var w = shape[1];
    var layer = document.createElement("canvas");
    layer.width = w;
    layer.height = h;
    var lctx = layer.getContext("2d");
    var pixels = lctx.createImageData(w, h);
    var data = pixels.data;
    rows.forEach(function (r) {
      var counts = (r.mask && r.mask.counts) || [];
      var hex = colour(r);
      var red = parseInt(hex.slice(1, 3), 16);
      var green = parseInt(hex.slice(3, 5), 16);
      var blue = parseInt(hex.slice(5, 7), 16);
      var p = 0;
      for (var i = 0; i < counts.length; i++) {
        if (i % 2 === 1) {
          for (var q = p; q < p + counts[i]; q++) {
            var o = ((q % h) * w + Math.floor(q / h)) * 4;
            data[o] = red;
            data[o + 1] = green;
            data[o + 2] = blue;
            data[o + 3] = 255;
          }
        }
        p += counts[i];
      }
    });
    lctx.putImageData(pixels, 0, 0);
    return layer;
  }

  function base64Bytes(text) {
    var raw = atob(text);
    var bytes = new Uint8Array(raw.length);
    for (var i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
    return bytes;
  }

  // A greyscale, non-interlaced PNG of 8 or 16 bits (what the model server writes) into its
  // values, with the browser's own zlib (DecompressionStream).
  function pngDecode(bytes) {
    var view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    var pos = 8;
    var width = 0;
    var height = 0;
    var bits = 0;
    var parts = [];
    while (pos + 8 <= bytes.length) {
      var length = view.getUint32(pos);
      var type = String.fromCharCode(bytes[pos + 4], bytes[pos + 5], bytes[pos + 6], bytes[pos + 7]);
      var body = bytes.subarray(pos + 8, pos + 8 + length);
      if (type === "IHDR") {
        width = view.getUint32(pos + 8);
        height = view.getUint32(pos + 12);
        bits = body[8];
        if (body[9] !== 0 || body[12] !== 0 || (bits !== 8 && bits !== 16)) {
          return Promise.reject(new Error("not an 8- or 16-bit greyscale PNG"));
        }
      } else if (type === "IDAT") {
        parts.push(body);
      } else if (type === "IEND") {
        break;
      }
      pos += 12 + length;
    }
    var stream = new Blob(parts).stream().pipeThrough(new DecompressionStream("deflate"));
    return new Response(stream).arrayBuffer().then(function (buffer) {
      var raw = new Uint8Array(buffer);
      var bpp = bits / 8;
      var stride = width * bpp;
      var rows = new Uint8Array(stride * height);
      for (var y = 0; y < height; y++) {
        var filter = raw[y * (stride + 1)];
        var src = y * (stride + 1) + 1;
        var dst = y * stride;
        for (var x = 0; x < stride; x++) {
          var a = x >= bpp ? rows[dst + x - bpp] : 0;
          var b = y > 0 ? rows[dst - stride + x] : 0;
          var c = x >= bpp && y > 0 ? rows[dst - stride + x - bpp] : 0;
          var v = raw[src + x];
          if (filter === 1) v += a;
          else if (filter === 2) v += b;
          else if (filter === 3) v += (a + b) >> 1;
          else if (filter === 4) {
            var pa = Math.abs(b - c);
            var pb = Math.abs(a - c);
            var pc = Math.abs(a + b - 2 * c);
            v += pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
          }
          rows[dst + x] = v & 255;
        }
      }
      var values = bits === 16 ? new Uint16Array(width * height) : rows;
      if (bits === 16) for (var i = 0; i < values.length; i++) values[i] = (rows[2 * i] << 8) | rows[2 * i + 1];
      return { width: width, height: height, values: values };
    });
  }

  // Turbo (Google's polynomial fit), t in 0..1: what the dataset pages draw depth with.
  function turbo(t) {
    var r = 0.13572138 + t * (4.6153926 + t * (-42.66032258 + t * (132.13108234 + t * (-152.94239396 + t * 59.28637943))));
    var g = 0.09140261 + t * (2.19418839 + t * (4.84296658 + t * (-14.18503333 + t * (4.27729857 + t * 2.82956604))));
    var b = 0.1066733 + t * (12.64194608 + t * (-60.58204836 + t * (110.36276771 + t * (-89.90310912 + t * 27.34824973))));
    var clamp = function (x) { return Math.max(0, Math.min(255, Math.round(x * 255))); };
    return [clamp(r), clamp(g), clamp(b)];
  }

  // Near is warm, far is cool; no reading is transparent.
  function depthLayer(decoded, scale) {
    var layer = document.createElement("canvas");
    layer.width = decoded.width;
    layer.height = decoded.height;
    var lctx = layer.getContext("2d");
    var pixels = lctx.createImageData(decoded.width, decoded.height);
    var values = decoded.values;
    var lo = Infinity;
    var hi = -Infinity;
    for (var i = 0; i < values.length; i++) {
      if (!values[i]) continue;
      if (values[i] < lo) lo = values[i];
      if (values[i] > hi) hi = values[i];
    }
    var span = Math.max(hi - lo, 1);
    for (var j = 0; j < values.length; j++) {
      if (!values[j]) continue;
      var rgb = turbo(1 - (values[j] - lo) / span);
      pixels.data[4 * j] = rgb[0];
      pixels.data[4 * j + 1] = rgb[1];
      pixels.data[4 * j + 2] = rgb[2];
      pixels.data[4 * j + 3] = 255;
    }
    lctx.putImageData(pixels, 0, 0);
    return layer;
  }

  function pixelTake(image) {
    var shape = image.shape || [state.image.naturalHeight, state.image.naturalWidth];
    if (task === "semantic") {
      var rows = (image.results || []).filter(function (r) { return r.mask && r.mask.counts; });
      state.results = rows;
      state.pixel = { kind: "semantic", rows: rows, layer: semanticLayer(rows, shape) };
      state.ok = true;
      setStatus("");
      draw();
      return;
    }
    var depth = image.depth;
    if (!depth || !depth.data) {
      showError("The answer held no depth map.");
      return;
    }
    return pngDecode(base64Bytes(depth.data)).then(
      function (decoded) {
        state.results = [];
        state.pixel = {
          kind: "depth",
          depth: depth,
          values: decoded.values,
          width: decoded.width,
          height: decoded.height,
          layer: depthLayer(decoded, depth.scale),
        };
        state.ok = true;
        setStatus("");
        draw();
      },
      function (err) {
        if (window.console) console.error(err);
        showError("This browser could not read the depth map (" + err.message + ").");
      }
    );
  }

  // Metres at a point of the canvas, or null where there is no reading.
  function depthAt(cx, cy) {
    var px = state.pixel;
    if (!px || px.kind !== "depth") return null;
    var x = Math.floor((cx / canvas.width) * px.width);
    var y = Math.floor((cy / canvas.height) * px.height);
    if (x < 0 || y < 0 || x >= px.width || y >= px.height) return null;
    var value = px.values[y * px.width + x];
    return value ? value / px.depth.scale : null;
  }

  function metres(value) {
    return typeof value === "number" ? value.toFixed(value < 10 ? 2 : 1) + " m" : "—";
  }

  function depthLegend() {
    var px = state.pixel;
    depthScale.hidden = !(px && px.kind === "depth");
    if (depthScale.hidden) {
      depthReadout.textContent = "";
      return;
    }
    var stops = [];
    for (var i = 0; i <= 10; i++) {
      var rgb = turbo(1 - i / 10);
      stops.push("rgb(" + rgb.join(",") + ") " + i * 10 + "%");
    }
    depthScale.querySelector(".ramp").style.background = "linear-gradient(to right, " + stops.join(", ") + ")";
    depthScale.querySelector(".near").textContent = metres(px.depth.min);
    depthScale.querySelector(".far").textContent = metres(px.depth.max);
    if (!depthReadout.textContent) depthReadout.textContent = "Point at the image to read its depth.";
  }

  function legendRow(swatchColour, name, value, share) {
    var li = document.createElement("li");
    var swatch = document.createElement("span");
    swatch.className = "swatch";
    if (swatchColour) swatch.style.backgroundColor = swatchColour;
    var label = document.createElement("span");
    label.className = "name";
    label.textContent = name;
    var figure = document.createElement("span");
    figure.className = "conf";
    figure.textContent = value;
    li.append(swatch, label, figure);
    if (typeof share === "number") {
      var bar = document.createElement("span");
      bar.className = "bar";
      var fill = document.createElement("span");
      fill.style.width = Math.round(share * 100) + "%";
      fill.style.backgroundColor = swatchColour;
      bar.appendChild(fill);
      li.appendChild(bar);
    }
    return li;
  }

  function renderPixelLegend() {
    list.textContent = "";
    var px = state.pixel;
    depthLegend();
    if (!px) {
      countLine.textContent = "";
      return;
    }
    if (px.kind === "semantic") {
      var rows = px.rows.slice().sort(function (a, b) { return b.pixel_share - a.pixel_share; });
      countLine.textContent = rows.length
        ? rows.length + " class" + (rows.length === 1 ? "" : "es") + " in the image, by share of its pixels:"
        : "No class found in any pixel.";
      rows.forEach(function (r) {
        var percent = (r.pixel_share * 100).toFixed(r.pixel_share < 0.1 ? 1 : 0) + " %";
        list.appendChild(legendRow(colour(r), r.name || "class " + r["class"], percent, r.pixel_share));
      });
      return;
    }
    var d = px.depth;
    countLine.textContent = d.min === null ? "No pixel has a depth reading." : "Depth in metres:";
    list.appendChild(legendRow(null, "nearest", metres(d.min)));
    list.appendChild(legendRow(null, "median", metres(d.median)));
    list.appendChild(legendRow(null, "farthest", metres(d.max)));
  }

  // --- drawing -------------------------------------------------------------------------------

  function visible() {
    var t = threshold();
    return state.results.filter(function (r) { return r.confidence >= t; });
  }

  function polygon(ctx, xs, ys, sx, sy) {
    ctx.beginPath();
    for (var i = 0; i < xs.length; i++) {
      var x = xs[i] * sx;
      var y = ys[i] * sy;
      if (i === 0) ctx.moveTo(x, y);
      else ctx.lineTo(x, y);
    }
    ctx.closePath();
  }

  function tag(ctx, text, x, y, colourValue, font) {
    ctx.font = "600 " + font + "px system-ui, sans-serif";
    var w = ctx.measureText(text).width + font * 0.6;
    var h = font * 1.35;
    var top = y - h >= 0 ? y - h : y;
    var left = Math.max(0, Math.min(x, ctx.canvas.width - w));
    ctx.fillStyle = colourValue;
    ctx.fillRect(left, top, w, h);
    ctx.fillStyle = "#fff";
    ctx.textBaseline = "middle";
    ctx.fillText(text, left + font * 0.3, top + h / 2);
  }

  function drawResult(ctx, r, sx, sy, line, font) {
    var c = colour(r);
    ctx.strokeStyle = c;
    ctx.lineWidth = line;
    var box = r.box;
    var anchor = null;
    if (hasMask(r)) {
      polygon(ctx, r.segments.x, r.segments.y, sx, sy);
      ctx.stroke();
    }
    if (box && box.x4 !== undefined) {
      var xs = [box.x1, box.x2, box.x3, box.x4];
      var ys = [box.y1, box.y2, box.y3, box.y4];
      polygon(ctx, xs, ys, sx, sy);
      ctx.stroke();
      var top = 0;
      for (var i = 1; i < 4; i++) if (ys[i] < ys[top]) top = i;
      anchor = [xs[top] * sx, ys[top] * sy];
    } else if (box) {
      if (!r.segments) ctx.strokeRect(box.x1 * sx, box.y1 * sy, (box.x2 - box.x1) * sx, (box.y2 - box.y1) * sy);
      else {
        ctx.setLineDash([line * 3, line * 2]);
        ctx.strokeRect(box.x1 * sx, box.y1 * sy, (box.x2 - box.x1) * sx, (box.y2 - box.y1) * sy);
        ctx.setLineDash([]);
      }
      anchor = [box.x1 * sx, box.y1 * sy];
    }
    if (r.keypoints && r.keypoints.x) drawKeypoints(ctx, r.keypoints, sx, sy, line, c);
    if (anchor) tag(ctx, label(r), anchor[0], anchor[1], c, font);
  }

  function hasMask(r) {
    return r.segments && r.segments.x && r.segments.x.length > 2;
  }

  // Masks are filled opaque on a layer of their own, then laid over the photo once at MASK_ALPHA:
  // however many overlap, the photo stays visible under them.
  function drawMasks(ctx, results, sx, sy) {
    var masked = results.filter(hasMask);
    if (!masked.length) return;
    var layer = document.createElement("canvas");
    layer.width = ctx.canvas.width;
    layer.height = ctx.canvas.height;
    var lctx = layer.getContext("2d");
    masked.forEach(function (r) {
      polygon(lctx, r.segments.x, r.segments.y, sx, sy);
      lctx.fillStyle = colour(r);
      lctx.fill();
    });
    ctx.globalAlpha = MASK_ALPHA;
    ctx.drawImage(layer, 0, 0);
    ctx.globalAlpha = 1;
  }

  function drawKeypoints(ctx, kp, sx, sy, line, c) {
    var n = kp.x.length;
    var seen = function (i) {
      return i < n && (!kp.visible || kp.visible[i] === undefined || kp.visible[i] >= KEYPOINT_VISIBLE) &&
        (kp.x[i] !== 0 || kp.y[i] !== 0);
    };
    if (n === 17) {
      ctx.strokeStyle = c;
      ctx.lineWidth = Math.max(1, line * 0.8);
      SKELETON.forEach(function (pair) {
        var a = pair[0] - 1;
        var b = pair[1] - 1;
        if (!seen(a) || !seen(b)) return;
        ctx.beginPath();
        ctx.moveTo(kp.x[a] * sx, kp.y[a] * sy);
        ctx.lineTo(kp.x[b] * sx, kp.y[b] * sy);
        ctx.stroke();
      });
    }
    for (var i = 0; i < n; i++) {
      if (!seen(i)) continue;
      ctx.beginPath();
      ctx.arc(kp.x[i] * sx, kp.y[i] * sy, line * 1.6, 0, Math.PI * 2);
      ctx.fillStyle = PALETTE[i % PALETTE.length];
      ctx.fill();
      ctx.lineWidth = 1;
      ctx.strokeStyle = "#fff";
      ctx.stroke();
    }
  }

  function draw() {
    var img = state.image;
    if (!img) return;
    resultBox.hidden = false;
    var w = img.naturalWidth;
    var h = img.naturalHeight;
    var fit = Math.min(1, MAX_CANVAS_SIDE / Math.max(w, h));
    canvas.width = Math.round(w * fit);
    canvas.height = Math.round(h * fit);
    canvas.classList.toggle("small", Math.max(canvas.width, canvas.height) < SMALL_SIDE);
    var ctx = canvas.getContext("2d");
    ctx.drawImage(img, 0, 0, canvas.width, canvas.height);
    var shape = state.shape || [h, w];
    var sx = canvas.width / shape[1];
    var sy = canvas.height / shape[0];
    var side = Math.max(canvas.width, canvas.height);
    var line = Math.max(2, Math.round(side / 240));
    var font = Math.max(12, Math.round(side / 45));
    if (PIXEL_TASKS[task]) {
      if (state.pixel) {
        ctx.globalAlpha = state.pixel.kind === "depth" ? DEPTH_ALPHA : MASK_ALPHA;
        ctx.imageSmoothingEnabled = state.pixel.kind === "depth"; // class edges stay sharp
        ctx.drawImage(state.pixel.layer, 0, 0, canvas.width, canvas.height);
        ctx.globalAlpha = 1;
        ctx.imageSmoothingEnabled = true;
      }
      state.shown = state.pixel && state.pixel.kind === "semantic" ? state.pixel.rows.length : 0;
      renderPixelLegend();
      return;
    }
    var shown = visible();
    var boxed = shown.filter(function (r) { return r.box || r.segments || r.keypoints; });
    // Largest first, so small objects' outlines and labels stay on top.
    boxed.sort(function (a, b) { return area(b) - area(a); });
    drawMasks(ctx, boxed, sx, sy);
    boxed.forEach(function (r) { drawResult(ctx, r, sx, sy, line, font); });
    if (task === "classify" && shown.length && !boxed.length) {
      var best = shown.reduce(function (a, b) { return b.confidence > a.confidence ? b : a; });
      tag(ctx, label(best), line * 2, font * 1.35 + line * 2, colour(best), font * 1.3);
    }
    state.shown = shown.length;
    renderList(shown);
  }

  function area(r) {
    var b = r.box;
    if (!b) return 0;
    if (b.x4 !== undefined) {
      return Math.abs(b.x1 * b.y2 - b.x2 * b.y1 + b.x2 * b.y3 - b.x3 * b.y2 + b.x3 * b.y4 - b.x4 * b.y3 + b.x4 * b.y1 - b.x1 * b.y4) / 2;
    }
    return Math.abs((b.x2 - b.x1) * (b.y2 - b.y1));
  }

  function renderList(shown) {
    sliderValue.textContent = threshold().toFixed(2);
    var total = state.results.length;
    if (!state.requests) {
      countLine.textContent = "";
    } else if (!state.ok) {
      countLine.textContent = "";
    } else if (!total) {
      countLine.textContent = "The model found nothing above " + parseFloat(requestConf).toFixed(2) + ".";
    } else {
      countLine.textContent = shown.length + " of " + total + " shown at " + threshold().toFixed(2) + " or more.";
    }
    var sorted = shown.slice().sort(function (a, b) { return b.confidence - a.confidence; });
    list.textContent = "";
    sorted.forEach(function (r) {
      var li = document.createElement("li");
      var swatch = document.createElement("span");
      swatch.className = "swatch";
      swatch.style.backgroundColor = colour(r);
      var name = document.createElement("span");
      name.className = "name";
      name.textContent = r.name || "class " + r["class"];
      var conf = document.createElement("span");
      conf.className = "conf";
      conf.textContent = r.confidence.toFixed(2);
      var bar = document.createElement("span");
      bar.className = "bar";
      var fill = document.createElement("span");
      fill.style.width = Math.round(r.confidence * 100) + "%";
      fill.style.backgroundColor = colour(r);
      bar.appendChild(fill);
      li.append(swatch, name, conf, bar);
      list.appendChild(li);
    });
  }

  // --- wiring --------------------------------------------------------------------------------

  fileInput.addEventListener("change", function () {
    if (fileInput.files[0] && fileInput.files[0] !== state.file) take(fileInput.files[0]);
  });
  ["dragenter", "dragover"].forEach(function (type) {
    dropzone.addEventListener(type, function (e) {
      e.preventDefault();
      dropzone.classList.add("over");
    });
  });
  ["dragleave", "dragend"].forEach(function (type) {
    dropzone.addEventListener(type, function () { dropzone.classList.remove("over"); });
  });
  dropzone.addEventListener("drop", function (e) {
    e.preventDefault();
    dropzone.classList.remove("over");
    var files = e.dataTransfer && e.dataTransfer.files;
    if (!files || !files.length) return;
    take(files[0]);
    try {
      fileInput.files = files; // the picker shows the dropped file's name (its change is ignored)
    } catch (err) {
      // older browsers: the input stays empty, the page works from state.file
    }
  });
  // A paste of a copied image is a drop too.
  document.addEventListener("paste", function (e) {
    var items = (e.clipboardData && e.clipboardData.files) || [];
    if (items.length) take(items[0]);
  });
  // A public model's page offers its dataset's pictures: one click fetches the image (same
  // origin, the session's own access) and runs the model on it as on a dropped file.
  root.querySelectorAll("[data-try-sample]").forEach(function (button) {
    button.addEventListener("click", function () {
      if (state.busy || state.holding) return;
      setStatus("Fetching " + button.dataset.name + "…", "busy");
      fetch(button.dataset.trySample, { credentials: "same-origin" })
        .then(function (response) {
          if (!response.ok) throw new Error("HTTP " + response.status);
          return response.blob();
        })
        .then(function (blob) {
          take(new File([blob], button.dataset.name || "image", { type: blob.type || "image/jpeg" }));
        })
        .catch(function () { showError("Could not fetch " + button.dataset.name + "."); });
    });
  });
  form.noValidate = true; // the file may have come by drop or paste; checked below
  form.addEventListener("submit", function (e) {
    e.preventDefault();
    if (state.file) predict();
    else if (fileInput.files[0]) take(fileInput.files[0]);
    else showError("Drop an image or choose a file first.");
  });
  sizeSelect.addEventListener("change", function () { if (state.file) predict(); });
  slider.addEventListener("input", function () {
    sliderValue.textContent = threshold().toFixed(2);
    draw();
  });
  function pointAt(e) {
    var rect = canvas.getBoundingClientRect();
    return [((e.clientX - rect.left) / rect.width) * canvas.width, ((e.clientY - rect.top) / rect.height) * canvas.height];
  }
  canvas.addEventListener("mousemove", function (e) {
    if (!state.pixel || state.pixel.kind !== "depth") return;
    var point = pointAt(e);
    var value = depthAt(point[0], point[1]);
    depthReadout.textContent = value === null ? "No depth reading here." : "Depth here: " + metres(value);
  });

  // --- copying the snippets ------------------------------------------------------------------

  function flash(button, text) {
    button.textContent = text;
    window.setTimeout(function () { button.textContent = "Copy"; }, 1800);
  }

  function selectText(node) {
    var range = document.createRange();
    range.selectNodeContents(node);
    var selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
  }

  function copyFallback(button, node) {
    selectText(node);
    var ok = false;
    try {
      ok = document.execCommand("copy");
    } catch (e) {
      ok = false;
    }
    flash(button, ok ? "Copied" : "Press Ctrl+C");
  }

  document.querySelectorAll("[data-copy]").forEach(function (button) {
    button.addEventListener("click", function () {
      var node = $(button.dataset.copy);
      if (!node) return;
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(node.textContent).then(
          function () { flash(button, "Copied"); },
          function () { copyFallback(button, node); }
        );
      } else {
        copyFallback(button, node);
      }
    });
  });

  // For tests and the curious: what the page shows now.
  window.kestrelTry = {
    ready: function () { return !!state.image && !state.busy && state.requests > 0; },
    busy: function () { return state.busy; },
    holding: function () { return state.holding; },
    total: function () { return state.results.length; },
    confidences: function () { return state.results.map(function (r) { return r.confidence; }); },
    shown: function () { return state.shown; },
    threshold: threshold,
    error: function () { return state.error; },
    requests: function () { return state.requests; },
    // Per-pixel answers: the legend's rows, the depth (m) at a point of the answer's image.
    classShares: function () {
      return state.pixel && state.pixel.kind === "semantic"
        ? state.pixel.rows.map(function (r) { return { name: r.name, share: r.pixel_share }; })
        : [];
    },
    depthAt: function (x, y) {
      var px = state.pixel;
      if (!px || px.kind !== "depth") return null;
      return depthAt(((x + 0.5) / px.width) * canvas.width, ((y + 0.5) / px.height) * canvas.height);
    },
    depthFigures: function () {
      var px = state.pixel;
      return px && px.kind === "depth" ? { min: px.depth.min, median: px.depth.median, max: px.depth.max } : null;
    },
    overlaid: function () { return !!state.pixel; },
  };
})();
