// The job page as a live monitor: it starts from the JSON the page embeds (json_script
// "job-live-data", the same shape as the event stream's snapshot) and, while the job is not
// final, follows the server-sent events of training.live: snapshot, state, batch, epoch, log,
// system, end. Everything it draws is text set with textContent; the page works without it.
(function () {
  "use strict";

  var root = document.getElementById("job-live");
  var source = document.getElementById("job-live-data");
  if (!root || !source) return;
  var data;
  try {
    data = JSON.parse(source.textContent);
  } catch (e) {
    return;
  }

  var MAX_LOG_LINES = 2000;
  var MAX_SYSTEM_POINTS = 600;
  var TRACEBACK = "Traceback (most recent call last):";
  var COLORS = ["#b4532a", "#1d6fb8", "#2f8f4e", "#8a4fbf", "#c79a1a", "#d2476b", "#2a9d9a", "#6b6f74"];

  var job = data.job;
  var title = data.title;
  var epochs = new Map(); // epoch number -> {values, seconds}
  var progress = null;
  var rate = null; // batches per second, smoothed
  var lastBatch = null;
  var system = [];
  var stream = null;

  function $(selector, scope) {
    return (scope || root).querySelector(selector);
  }

  function testid(name) {
    return $("[data-testid='" + name + "']");
  }

  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = text;
    return node;
  }

  function setText(node, text) {
    if (node && node.textContent !== text) node.textContent = text;
  }

  function show(node, visible) {
    if (node) node.hidden = !visible;
  }

  function fixed(value, digits) {
    return typeof value === "number" && isFinite(value) ? value.toFixed(digits) : "—";
  }

  function duration(seconds) {
    seconds = Math.max(0, Math.round(seconds));
    var h = Math.floor(seconds / 3600);
    var m = Math.floor((seconds % 3600) / 60);
    var s = seconds % 60;
    var mm = h ? String(m).padStart(2, "0") : String(m);
    return (h ? h + ":" : "") + mm + ":" + String(s).padStart(2, "0");
  }

  // --- tabs ----------------------------------------------------------------------------------

  var tablist = testid("job-tabs");
  var tabs = Array.prototype.slice.call(tablist.querySelectorAll("[role=tab]"));

  function activate(name, focus) {
    tabs.forEach(function (tab) {
      var on = tab.dataset.tab === name;
      tab.setAttribute("aria-selected", on ? "true" : "false");
      tab.tabIndex = on ? 0 : -1;
      show(document.getElementById(tab.getAttribute("aria-controls")), on);
      if (on && focus) tab.focus();
    });
    if (name === "console") followTail();
  }

  function tabsStart() {
    root.classList.add("tabs-on");
    show(tablist, true);
    var asked = (location.hash || "").replace("#", "");
    var names = tabs.map(function (t) { return t.dataset.tab; });
    activate(names.indexOf(asked) >= 0 ? asked : root.dataset.defaultTab || "charts");
    tablist.addEventListener("click", function (event) {
      var tab = event.target.closest("[role=tab]");
      if (!tab) return;
      activate(tab.dataset.tab);
      history.replaceState(null, "", "#" + tab.dataset.tab);
    });
    tablist.addEventListener("keydown", function (event) {
      var at = tabs.indexOf(document.activeElement);
      if (at < 0) return;
      var to = { ArrowRight: at + 1, ArrowLeft: at - 1, Home: 0, End: tabs.length - 1 }[event.key];
      if (to === undefined) return;
      event.preventDefault();
      var tab = tabs[(to + tabs.length) % tabs.length];
      activate(tab.dataset.tab, true);
      history.replaceState(null, "", "#" + tab.dataset.tab);
    });
  }

  // --- header, buttons, progress -------------------------------------------------------------

  function training() {
    return job.state === "running" || job.state === "stopping";
  }

  function startedAt() {
    return job.started_at ? Date.parse(job.started_at) : null;
  }

  function tick() {
    var start = startedAt();
    show(testid("job-elapsed-wrap"), start !== null);
    if (start === null) return;
    var end = job.finished_at ? Date.parse(job.finished_at) : Date.now();
    setText(testid("job-elapsed"), duration((end - start) / 1000));
  }

  function updateTitle() {
    var head;
    if (job.state === "running" && progress && progress.epoch) {
      head = "Epoch " + progress.epoch + "/" + (progress.epochs || job.epochs);
    } else {
      head = job.state_display;
    }
    document.title = head + " · " + title + " · Kestrel";
  }

  function updateButtons() {
    var stop = testid("job-stop-form");
    var cancel = testid("job-cancel");
    var resume = testid("job-resume-form");
    show(stop, !job.is_final && job.state !== "stopping");
    show(cancel, !job.is_final && !job.cancel_requested);
    show(resume, !!job.resumable);
    var noResume = testid("job-no-resume");
    if (noResume) {
      show(noResume, !!job.no_resume);
      setText(noResume, job.no_resume || "");
    }
  }

  function applyJob(next) {
    if (!next) return;
    job = next;
    var badge = testid("job-state");
    badge.className = "badge state-" + job.state;
    setText(badge, job.state_display);
    testid("job-status").dataset.state = job.state;
    show(testid("job-canceling"), job.cancel_requested && !job.is_final);
    if (job.device) setText(testid("job-device"), job.device);
    var notice = testid("job-notice");
    if (notice) {
      show(notice, !!job.notice);
      setText(notice, job.notice || "");
    }
    var error = testid("job-error");
    show(error, !!job.error);
    setText(error.querySelector("p"), job.error || "");
    var run = testid("job-run-bar");
    run.max = Math.max(1, job.epochs);
    run.value = job.epochs_done;
    updateButtons();
    updateProgress();
    applyWatch(job.watch);
    applyCost(job.cost);
    tick();
  }

  // Credits used and still held: Stop and the end release the hold, and the header says so.
  function applyCost(cost) {
    if (!cost) return;
    setText(testid("job-cost-spent"), cost.spent_text);
    setText(testid("job-cost-held-figure"), cost.held_text);
    show(testid("job-cost-held"), cost.held > 0);
  }

  function meanEpochSeconds() {
    var total = 0;
    var n = 0;
    epochs.forEach(function (e) {
      if (typeof e.seconds === "number" && e.seconds > 0) {
        total += e.seconds;
        n += 1;
      }
    });
    return n ? total / n : null;
  }

  function updateProgress() {
    var line = testid("job-progress");
    var bar = testid("job-epoch-bar");
    if (progress && training()) {
      var text = "Epoch " + progress.epoch + " of " + progress.epochs + " · batch " + progress.batch + " of " + progress.batches;
      var loss = (progress.loss || []).filter(function (l) { return typeof l === "number"; });
      if (loss.length) text += " · loss " + loss.map(function (l) { return fixed(l, 3); }).join(" / ");
      setText(line, text);
      bar.max = Math.max(1, progress.batches);
      bar.value = progress.batch;
      show(bar, true);
      show(testid("job-epoch-label"), true);
    } else {
      // The phase in words true of the job's machine (training.selectors.job_phase_text).
      var sentence = (job.phase_text ? job.phase_text + " " : "") + "Epoch " + job.epochs_done + " of " + job.epochs;
      if (job.checkpoint_epoch) sentence += " · checkpoint at epoch " + job.checkpoint_epoch;
      setText(line, sentence + ".");
      show(bar, false);
      show(testid("job-epoch-label"), false);
    }
    var speedText = "";
    var etaText = "";
    if (progress && training() && rate) {
      var size = progress.batch_size || data.batch_size;
      if (size) {
        var speed = rate * size;
        speedText = "· " + speed.toFixed(speed < 10 ? 1 : 0) + " images/s";
      }
      var perBatch = 1 / rate;
      var epochLeft = Math.max(0, progress.batches - progress.batch) * perBatch;
      var epochSeconds = meanEpochSeconds() || progress.batches * perBatch;
      var runLeft = epochLeft + Math.max(0, progress.epochs - progress.epoch) * epochSeconds;
      etaText = "· ETA " + duration(epochLeft) + " this epoch, " + duration(runLeft) + " the run";
    }
    setText(testid("job-speed"), speedText);
    setText(testid("job-eta"), etaText);
    updateTitle();
  }

  function applyBatch(batch) {
    if (!batch || typeof batch.batch !== "number") return;
    // Images/s = Δbatch × batch size / Δt between two batches of one epoch, smoothed; t is the
    // server's arrival time of each (the snapshot's latest batch has none: it only starts).
    var t = typeof batch.t === "number" ? batch.t : null;
    if (t && lastBatch && lastBatch.epoch === batch.epoch && batch.batch > lastBatch.batch && t > lastBatch.t) {
      var now = (batch.batch - lastBatch.batch) / ((t - lastBatch.t) / 1000);
      rate = rate ? 0.7 * rate + 0.3 * now : now;
    }
    lastBatch = t ? { epoch: batch.epoch, batch: batch.batch, t: t } : null;
    progress = batch; // shown while the job is running or stopping (its state event says)
    updateProgress();
  }

  // --- charts --------------------------------------------------------------------------------

  var charts = {};

  function chartAvailable() {
    return typeof window.Chart !== "undefined";
  }

  // axes: {x: title of the x axis, min, max: the y axis' fixed range (percentages)}.
  function lineOptions(logScale, axes) {
    var y = { type: logScale ? "logarithmic" : "linear" };
    if (axes.min !== undefined) y.min = axes.min;
    if (axes.max !== undefined) y.max = axes.max;
    return {
      responsive: true,
      maintainAspectRatio: false,
      animation: false,
      spanGaps: true,
      interaction: { mode: "index", intersect: false },
      plugins: {
        legend: { position: "bottom", labels: { usePointStyle: true, pointStyle: "line", boxWidth: 24 } },
        tooltip: {
          callbacks: {
            label: function (ctx) {
              var v = ctx.parsed.y;
              var shown = Math.abs(v) < 0.01 && v !== 0 ? v.toExponential(3) : v.toFixed(4);
              return ctx.dataset.label + ": " + shown;
            },
          },
        },
      },
      scales: {
        x: { title: { display: !!axes.x, text: axes.x }, ticks: { maxTicksLimit: 12, autoSkip: true } },
        y: y,
      },
    };
  }

  // One chart in `containerId`, made the first time it has data; kept in `charts[key]`.
  function chart(key, containerId, caption, logScale, axes) {
    if (charts[key]) return charts[key];
    var container = document.getElementById(containerId);
    var figure = el("figure", "chart");
    figure.dataset.chart = key;
    var head = el("figcaption", null, caption);
    if (logScale) head.appendChild(el("small", "muted", " · log scale"));
    figure.appendChild(head);
    var box = el("div", "chart-box");
    var canvas = document.createElement("canvas");
    canvas.setAttribute("role", "img");
    canvas.setAttribute("aria-label", caption);
    box.appendChild(canvas);
    figure.appendChild(box);
    container.appendChild(figure);
    charts[key] = new window.Chart(canvas, {
      type: "line",
      data: { labels: [], datasets: [] },
      options: lineOptions(logScale, axes),
    });
    return charts[key];
  }

  function setSeries(instance, labels, series) {
    instance.data.labels = labels;
    series.forEach(function (s) {
      var ds = instance.data.datasets.find(function (d) { return d.key === s.key; });
      if (!ds) {
        var color = COLORS[instance.data.datasets.length % COLORS.length];
        ds = {
          key: s.key,
          label: s.label,
          data: [],
          borderColor: color,
          backgroundColor: color,
          borderWidth: 2,
          pointRadius: 2,
          pointHoverRadius: 4,
          tension: 0,
        };
        if (s.dashed) ds.borderDash = [6, 4];
        instance.data.datasets.push(ds);
      }
      ds.data = s.data;
    });
    instance.update("none");
  }

  // The quality metrics in the order and with the names the server uses
  // (training.views.metric_groups); keys it does not know come last, as they are.
  var QUALITY = /^metrics\/(.+?)(?:\((\w)\))?$/;
  var KIND = { B: "box", M: "mask", P: "pose" };
  var NAMES = { precision: "Precision", recall: "Recall", mAP50: "mAP50", "mAP50-95": "mAP50-95" };
  var KNOWN = [];
  ["B", "M", "P"].forEach(function (suffix) {
    Object.keys(NAMES).forEach(function (name) { KNOWN.push("metrics/" + name + "(" + suffix + ")"); });
  });
  KNOWN.push("metrics/accuracy_top1", "metrics/accuracy_top5");
  // Semantic segmentation and depth (training.views.job_page.PIXEL_METRICS): shares from 0 to
  // 1 on the quality chart; depth's errors (AbsRel, RMSE in metres, SILog) on a chart of their
  // own, since they are not bounded by 1 and lower is better.
  var PIXEL = {
    "metrics/mIoU": "mIoU",
    "metrics/pixel_acc": "Pixel accuracy",
    "metrics/delta1": "δ1",
    "metrics/delta2": "δ2",
    "metrics/delta3": "δ3",
  };
  var DEPTH_ERRORS = { "metrics/abs_rel": "AbsRel", "metrics/rmse": "RMSE (m)", "metrics/silog": "SILog" };
  Object.keys(PIXEL).forEach(function (k) { KNOWN.push(k); });
  Object.keys(DEPTH_ERRORS).forEach(function (k) { KNOWN.push(k); });

  function qualityLabel(key) {
    if (key === "metrics/accuracy_top1") return "Top-1 accuracy";
    if (key === "metrics/accuracy_top5") return "Top-5 accuracy";
    if (PIXEL[key]) return PIXEL[key];
    if (DEPTH_ERRORS[key]) return DEPTH_ERRORS[key];
    var m = QUALITY.exec(key);
    if (!m) return key;
    var name = NAMES[m[1]] || m[1];
    return m[2] ? name + " (" + (KIND[m[2]] || m[2]) + ")" : name;
  }

  function qualityKeys(keys) {
    var rank = function (k) {
      var at = KNOWN.indexOf(k);
      return at < 0 ? KNOWN.length : at;
    };
    return keys.filter(function (k) { return QUALITY.test(k); }).sort(function (a, b) {
      return rank(a) - rank(b) || (a < b ? -1 : a > b ? 1 : 0);
    });
  }

  function accuracyOnly(keys) {
    return keys.every(function (k) { return k.indexOf("metrics/accuracy") === 0; });
  }

  function qualityTitle(keys) {
    if (accuracyOnly(keys)) return "Accuracy";
    if (keys.indexOf("metrics/mIoU") >= 0) return "mIoU, pixel accuracy";
    if (keys.indexOf("metrics/delta1") >= 0) return "Depth accuracy (δ)";
    return "Precision, recall, mAP";
  }

  function drawEpochCharts() {
    if (!chartAvailable() || !epochs.size) return;
    var numbers = Array.from(epochs.keys()).sort(function (a, b) { return a - b; });
    var keys = new Set();
    numbers.forEach(function (n) {
      Object.keys(epochs.get(n).values || {}).forEach(function (k) { keys.add(k); });
    });
    function values(key, positiveOnly) {
      return numbers.map(function (n) {
        var v = (epochs.get(n).values || {})[key];
        if (typeof v !== "number" || !isFinite(v)) return null;
        return positiveOnly && v <= 0 ? null : v;
      });
    }
    var losses = {};
    var rates = [];
    Array.from(keys).sort().forEach(function (key) {
      var parts = key.split("/");
      if ((parts[0] === "train" || parts[0] === "val") && parts[1]) {
        (losses[parts[1]] = losses[parts[1]] || []).push(key);
      } else if (parts[0] === "lr") {
        rates.push(key);
      }
    });
    var quality = qualityKeys(Array.from(keys));
    var errors = quality.filter(function (k) { return DEPTH_ERRORS[k]; });
    quality = quality.filter(function (k) { return !DEPTH_ERRORS[k]; });
    var axes = { x: "Epoch" };
    // Charts are made in this order the first time they have data: quality, depth errors,
    // losses, rates.
    if (quality.length) {
      setSeries(
        chart("quality", "charts-epochs", qualityTitle(quality), false, { x: "Epoch", min: 0, max: 1 }),
        numbers,
        quality.map(function (key) { return { key: key, label: qualityLabel(key), data: values(key) }; })
      );
    }
    if (errors.length) {
      setSeries(
        chart("depth-errors", "charts-epochs", "Depth error (lower is better)", false, axes),
        numbers,
        errors.map(function (key) { return { key: key, label: qualityLabel(key), data: values(key) }; })
      );
    }
    Object.keys(losses).sort().forEach(function (name) {
      var series = losses[name].sort().map(function (key) {
        var split = key.split("/")[0];
        return { key: key, label: split, data: values(key, true), dashed: split === "val" };
      });
      setSeries(chart("loss:" + name, "charts-epochs", name, true, axes), numbers, series);
    });
    if (rates.length) {
      setSeries(
        chart("lr", "charts-epochs", "Learning rate", false, axes),
        numbers,
        rates.map(function (key) { return { key: key, label: "group " + key.replace("lr/pg", ""), data: values(key) }; })
      );
    }
  }

  // The latest epoch's table, as the server draws it (training/_job_metrics.html).
  function drawSummary() {
    if (!epochs.size) return;
    var latest = Math.max.apply(null, Array.from(epochs.keys()));
    var values = epochs.get(latest).values || {};
    var box = document.getElementById("job-metrics");
    var head = el("h3", "metrics-head", "Metrics ");
    head.appendChild(el("span", "muted", "at epoch " + latest));
    var grid = el("div", "grid2");
    var left = el("div");
    var quality = qualityKeys(Object.keys(values));
    if (quality.length) {
      var table = el("table", "table metrics");
      var body = el("tbody");
      quality.forEach(function (key) {
        var tr = el("tr");
        tr.appendChild(el("th", null, qualityLabel(key))).scope = "row";
        tr.appendChild(el("td", null, fixed(values[key], 4)));
        body.appendChild(tr);
      });
      table.appendChild(body);
      left.appendChild(table);
    }
    var rates = Object.keys(values).filter(function (k) { return k.indexOf("lr/") === 0; });
    if (rates.length) {
      left.appendChild(el("p", "muted", "Learning rate: " + rates.map(function (k) {
        return fixed(values[k], 6) + " (group " + k.replace("lr/pg", "") + ")";
      }).join(", ")));
    }
    grid.appendChild(left);
    var losses = {};
    Object.keys(values).forEach(function (key) {
      var parts = key.split("/");
      if ((parts[0] === "train" || parts[0] === "val") && parts[1]) {
        (losses[parts[1]] = losses[parts[1]] || {})[parts[0]] = values[key];
      }
    });
    if (Object.keys(losses).length) {
      var lt = el("table", "table metrics");
      var thead = el("thead");
      var hr = el("tr");
      ["Loss", "Train", "Val"].forEach(function (h) { hr.appendChild(el("th", null, h)); });
      thead.appendChild(hr);
      lt.appendChild(thead);
      var lb = el("tbody");
      Object.keys(losses).forEach(function (name) {
        var tr = el("tr");
        tr.appendChild(el("th", null, name)).scope = "row";
        tr.appendChild(el("td", null, fixed(losses[name].train, 4)));
        tr.appendChild(el("td", null, fixed(losses[name].val, 4)));
        lb.appendChild(tr);
      });
      lt.appendChild(lb);
      var right = el("div");
      right.appendChild(lt);
      grid.appendChild(right);
    }
    box.replaceChildren(head, grid);
  }

  function setEpochs(list) {
    epochs.clear();
    (list || []).forEach(function (e) {
      epochs.set(e.epoch, { values: e.values || {}, seconds: e.seconds });
    });
    drawEpochCharts();
    drawSummary();
  }

  function applyEpoch(e) {
    if (!e || typeof e.epoch !== "number") return;
    epochs.set(e.epoch, { values: e.metrics || {}, seconds: e.seconds });
    if (e.epoch > job.epochs_done) {
      job = Object.assign({}, job, { epochs_done: e.epoch });
      testid("job-run-bar").value = e.epoch;
    }
    drawEpochCharts();
    drawSummary();
    updateProgress();
  }

  // --- system --------------------------------------------------------------------------------

  function clock(t) {
    var d = new Date(t);
    return [d.getHours(), d.getMinutes(), d.getSeconds()].map(function (n) { return String(n).padStart(2, "0"); }).join(":");
  }

  function drawSystem() {
    show(testid("system-empty"), !system.length);
    if (!system.length) return;
    var latest = system[system.length - 1].values || {};
    var parts = [
      "CPU " + fixed(latest.cpu_percent, 0) + " %",
      "RAM " + fixed(latest.ram_used_gb, 1) + " GB (" + fixed(latest.ram_percent, 0) + " %)",
      "trainer " + fixed(latest.process_rss_gb, 1) + " GB",
      "disk " + fixed(latest.disk_percent, 0) + " %",
    ];
    (latest.gpus || []).forEach(function (g, i) {
      var memory = typeof g.memory_used_gb === "number" || typeof g.memory_percent !== "number"
        ? fixed(g.memory_used_gb, 1) + " / " + fixed(g.memory_total_gb, 0) + " GB"
        : "memory " + fixed(g.memory_percent, 0) + " %";
      parts.push("GPU " + i + ": " + fixed(g.util_percent, 0) + " %, " + memory + ", " +
        fixed(g.temperature_c, 0) + " °C, " + fixed(g.power_w, 0) + " W");
    });
    setText(testid("system-latest"), "Now: " + parts.join(" · "));
    if (!chartAvailable()) return;
    var labels = system.map(function (s) { return clock(s.t); });
    function series(key) {
      return system.map(function (s) {
        var v = (s.values || {})[key];
        return typeof v === "number" ? v : null;
      });
    }
    function gpuSeries(i, key) {
      return system.map(function (s) {
        var g = ((s.values || {}).gpus || [])[i];
        return g && typeof g[key] === "number" ? g[key] : null;
      });
    }
    var axes = { x: "" };
    var percent = { x: "", min: 0, max: 100 };
    setSeries(chart("sys:percent", "charts-system", "CPU, RAM and disk (%)", false, percent), labels, [
      { key: "cpu_percent", label: "CPU %", data: series("cpu_percent") },
      { key: "ram_percent", label: "RAM %", data: series("ram_percent") },
      { key: "disk_percent", label: "disk %", data: series("disk_percent") },
    ]);
    var gpus = 0;
    system.forEach(function (s) { gpus = Math.max(gpus, ((s.values || {}).gpus || []).length); });
    var memory = [
      { key: "ram_used_gb", label: "RAM used", data: series("ram_used_gb") },
      { key: "process_rss_gb", label: "trainer", data: series("process_rss_gb") },
    ];
    for (var i = 0; i < gpus; i++) memory.push({ key: "gpu" + i, label: "GPU " + i, data: gpuSeries(i, "memory_used_gb") });
    setSeries(chart("sys:memory", "charts-system", "Memory used (GB)", false, { x: "", min: 0 }), labels, memory);
    if (!gpus) return;
    [
      ["util_percent", "GPU utilisation (%)", percent],
      ["temperature_c", "GPU temperature (°C)", axes],
      ["power_w", "GPU power (W)", { x: "", min: 0 }],
    ].forEach(function (spec) {
      var list = [];
      for (var i = 0; i < gpus; i++) list.push({ key: "gpu" + i, label: "GPU " + i, data: gpuSeries(i, spec[0]) });
      setSeries(chart("sys:" + spec[0], "charts-system", spec[1], false, spec[2]), labels, list);
    });
  }

  function addSystem(sample) {
    if (!sample || !sample.values) return;
    system.push(sample);
    if (system.length > MAX_SYSTEM_POINTS) system.splice(0, system.length - MAX_SYSTEM_POINTS);
    drawSystem();
  }

  // --- console -------------------------------------------------------------------------------

  var consoleBox = testid("console-lines");
  var search = testid("console-search");
  var followButton = testid("console-follow");
  var lines = []; // {plain, segments, kind, node}
  var inTraceback = false;
  var query = "";
  var following = true;

  function kindOf(plain) {
    if (plain.indexOf(TRACEBACK) === 0) {
      inTraceback = true;
      return "tb";
    }
    if (!inTraceback) return "";
    if (plain === "" || /^\s/.test(plain)) return "tb";
    inTraceback = false; // the exception line ends it
    return "tb tb-exc";
  }

  function fillLine(line) {
    var node = line.node;
    node.replaceChildren();
    line.segments.forEach(function (seg) {
      var parent = node;
      if (seg.cls) {
        parent = el("span", seg.cls);
        node.appendChild(parent);
      }
      if (!query) {
        parent.appendChild(document.createTextNode(seg.text));
        return;
      }
      var lower = seg.text.toLowerCase();
      var at = 0;
      var found;
      while ((found = lower.indexOf(query, at)) >= 0) {
        if (found > at) parent.appendChild(document.createTextNode(seg.text.slice(at, found)));
        parent.appendChild(el("mark", null, seg.text.slice(found, found + query.length)));
        at = found + query.length;
      }
      if (at < seg.text.length) parent.appendChild(document.createTextNode(seg.text.slice(at)));
    });
    if (!line.segments.length) node.appendChild(document.createTextNode("\u200b"));
    node.hidden = !!query && line.plain.toLowerCase().indexOf(query) < 0;
  }

  function makeLine(raw) {
    var parsed = window.KestrelAnsi ? window.KestrelAnsi.parse(String(raw)) : { plain: String(raw), segments: [{ text: String(raw), cls: "" }] };
    var line = { plain: parsed.plain, segments: parsed.segments, kind: kindOf(parsed.plain) };
    line.node = el("div", "line" + (line.kind ? " " + line.kind : ""));
    fillLine(line);
    return line;
  }

  function atBottom() {
    return consoleBox.scrollHeight - consoleBox.scrollTop - consoleBox.clientHeight < 8;
  }

  function followTail() {
    if (following) consoleBox.scrollTop = consoleBox.scrollHeight;
  }

  function countMatches() {
    if (!query) {
      setText(testid("console-count"), lines.length ? lines.length + " lines" : "Nothing printed yet.");
      return;
    }
    var n = lines.filter(function (l) { return !l.node.hidden; }).length;
    setText(testid("console-count"), n + " matching line" + (n === 1 ? "" : "s"));
  }

  function addLines(raw) {
    if (!raw || !raw.length) return;
    var fragment = document.createDocumentFragment();
    raw.forEach(function (text) {
      var line = makeLine(text);
      lines.push(line);
      fragment.appendChild(line.node);
    });
    consoleBox.appendChild(fragment);
    if (lines.length > MAX_LOG_LINES) {
      lines.splice(0, lines.length - MAX_LOG_LINES).forEach(function (l) { l.node.remove(); });
    }
    countMatches();
    followTail();
  }

  function setLines(raw) {
    lines = [];
    inTraceback = false;
    consoleBox.replaceChildren();
    addLines(raw || []);
    countMatches();
  }

  function consoleStart() {
    show(consoleBox, true);
    show(search, true);
    var timer = null;
    search.addEventListener("input", function () {
      clearTimeout(timer);
      timer = setTimeout(function () {
        query = search.value.trim().toLowerCase();
        lines.forEach(fillLine);
        countMatches();
        followTail();
      }, 120);
    });
    consoleBox.addEventListener("scroll", function () {
      following = atBottom();
      show(followButton, !following);
    });
    followButton.addEventListener("click", function () {
      following = true;
      followTail();
      show(followButton, false);
    });
  }

  // --- the event stream ----------------------------------------------------------------------

  // The stream's state, for people (a note) and for tests (data-stream on the page's root).
  function streamState(name) {
    root.dataset.stream = name;
  }

  function note(text) {
    var node = testid("job-live-note");
    setText(node, text);
    show(node, !!text);
  }

  // Whether anyone is watching the run: a late heartbeat, or a lost attempt being resumed.
  function applyWatch(watch) {
    var node = testid("job-watch");
    var text = (watch && watch.text) || "";
    setText(node, text);
    show(node, !!text);
    if (node) node.classList.toggle("late", !!(watch && watch.late));
  }

  function parse(event) {
    try {
      return JSON.parse(event.data);
    } catch (e) {
      return null;
    }
  }

  function applySnapshot(snap) {
    if (!snap) return;
    if (snap.epochs) setEpochs(snap.epochs);
    if (snap.logs) setLines(snap.logs);
    if (snap.system) {
      system = snap.system.slice(-MAX_SYSTEM_POINTS);
      drawSystem();
    }
    applyJob(snap.job);
    if (snap.progress) applyBatch(snap.progress);
  }

  // The parts the server draws from the database (results, attempts, files, the model link),
  // fetched again once the job has ended.
  function refreshServerParts() {
    fetch(location.pathname, { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) {
        if (!html) return;
        var fresh = new DOMParser().parseFromString(html, "text/html");
        root.querySelectorAll("[data-swap]").forEach(function (node) {
          var next = fresh.querySelector("[data-swap='" + node.dataset.swap + "']");
          if (next) node.replaceChildren.apply(node, Array.from(next.childNodes).map(function (n) { return document.importNode(n, true); }));
        });
      })
      .catch(function () {});
  }

  // After an epoch the server re-estimates the run from its measured epochs: fetch that part
  // again once the epoch is stored, at most every REFRESH_MS.
  var REFRESH_MS = 15000;
  var lastRefresh = 0;
  var refreshTimer = null;
  function refreshSoon() {
    if (refreshTimer) return;
    var wait = Math.max(2000, lastRefresh + REFRESH_MS - Date.now());
    refreshTimer = setTimeout(function () {
      refreshTimer = null;
      lastRefresh = Date.now();
      refreshServerParts();
    }, wait);
  }

  var RETRY_FIRST_MS = 5000;
  var RETRY_MAX_MS = 60000;
  var retryDelay = RETRY_FIRST_MS;

  function connect() {
    if (!data.events_url || typeof window.EventSource === "undefined") {
      note("Live updates are not available: reload the page to see changes.");
      return;
    }
    stream = new EventSource(data.events_url);
    streamState("connecting");
    stream.addEventListener("open", function () {
      streamState("open");
      note("");
      retryDelay = RETRY_FIRST_MS;
    });
    stream.addEventListener("error", function () {
      if (!stream) return;
      if (stream.readyState === EventSource.CLOSED) {
        // The browser gives up for good on an answer that is not the stream (a 502 from a
        // proxy, a 500 while the server was overloaded): ask again later, less and less often.
        stream = null;
        streamState("closed");
        note("Live updates paused: trying again in " + Math.round(retryDelay / 1000) + " s.");
        setTimeout(connect, retryDelay);
        retryDelay = Math.min(retryDelay * 2, RETRY_MAX_MS);
      } else {
        streamState("reconnecting");
        note("Reconnecting…");
      }
    });
    stream.addEventListener("snapshot", function (event) {
      applySnapshot(parse(event));
      root.dataset.snapshot = "applied"; // for tests: what follows comes as events
    });
    stream.addEventListener("state", function (event) { applyJob(parse(event)); });
    stream.addEventListener("watch", function (event) {
      job.watch = parse(event);
      applyWatch(job.watch);
    });
    stream.addEventListener("feed", function (event) {
      var d = parse(event);
      note(d && d.text ? d.text : "");
    });
    stream.addEventListener("batch", function (event) { applyBatch(parse(event)); });
    stream.addEventListener("epoch", function (event) {
      applyEpoch(parse(event));
      refreshSoon();
    });
    stream.addEventListener("log", function (event) {
      var d = parse(event);
      if (d) addLines(d.lines);
    });
    stream.addEventListener("system", function (event) { addSystem(parse(event)); });
    stream.addEventListener("end", function (event) {
      stream.close();
      stream = null;
      streamState("ended");
      note("");
      applyJob(parse(event));
      refreshServerParts();
    });
  }

  // --- start ---------------------------------------------------------------------------------

  tabsStart();
  consoleStart();
  setEpochs(data.epochs);
  setLines(data.logs);
  system = (data.system || []).slice(-MAX_SYSTEM_POINTS);
  drawSystem();
  applyJob(job);
  if (data.progress) applyBatch(data.progress);
  setInterval(tick, 1000);
  if (!job.is_final) connect();
  window.KestrelJobLive = { charts: charts };
})();
