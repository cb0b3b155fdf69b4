// The sweep page's charts, from the JSON its live part embeds (json_script "sweep-data"), drawn
// again each time htmx swaps that part in: a parallel-coordinates view (each trial a line
// through its arguments, each scaled from its low to its high, coloured by the metric) and one
// scatter per argument against the metric.
(function () {
  "use strict";

  var charts = [];
  var drawn = null; // the JSON last drawn: a poll that changed nothing redraws nothing

  function data() {
    var node = document.getElementById("sweep-data");
    if (!node || node.textContent === drawn) return null;
    try {
      drawn = node.textContent;
      return JSON.parse(node.textContent);
    } catch (e) {
      return null;
    }
  }

  function scaled(dim, value) {
    if (value === undefined || value === null) return null;
    if (dim.choices) {
      var i = dim.choices.indexOf(String(value));
      return dim.choices.length > 1 ? i / (dim.choices.length - 1) : 0.5;
    }
    if (dim.log) return (Math.log(value) - Math.log(dim.low)) / (Math.log(dim.high) - Math.log(dim.low));
    return (value - dim.low) / (dim.high - dim.low);
  }

  function shade(d, value) {
    // Darker for better: the scale runs over the values seen.
    var values = d.trials.map(function (t) { return t.value; }).filter(function (v) { return v !== null; });
    if (value === null || !values.length) return "rgba(150,145,135,0.5)";
    var lo = Math.min.apply(null, values), hi = Math.max.apply(null, values);
    var good = hi > lo ? (value - lo) / (hi - lo) : 1;
    if (d.direction === "minimize") good = 1 - good;
    return "rgba(180,83,42," + (0.25 + 0.75 * good).toFixed(2) + ")";
  }

  function clear() {
    charts.forEach(function (c) { c.destroy(); });
    charts = [];
    var box = document.getElementById("sweep-scatters");
    if (box) box.innerHTML = "";
  }

  function parallel(d) {
    var el = document.getElementById("sweep-parallel");
    if (!el || !el.getContext) return;
    var labels = d.dims.map(function (dim) { return dim.name; });
    charts.push(new window.Chart(el, {
      type: "line",
      data: {
        labels: labels,
        datasets: d.trials.map(function (t) {
          var color = shade(d, t.value);
          return {
            label: "Trial " + t.number + (t.value !== null ? " (" + t.value.toPrecision(3) + ")" : ""),
            data: d.dims.map(function (dim) { return scaled(dim, t.params[dim.name]); }),
            borderColor: color,
            backgroundColor: color,
            borderDash: t.state === "pruned" || t.state === "stopped" ? [4, 3] : [],
            borderWidth: 2,
            pointRadius: 3,
            tension: 0,
          };
        }),
      },
      options: {
        responsive: true,
        maintainAspectRatio: false,
        animation: false,
        plugins: { legend: { position: "bottom" } },
        scales: { y: { min: 0, max: 1, title: { display: true, text: "low → high" } } },
      },
    }));
  }

  function scatters(d) {
    var box = document.getElementById("sweep-scatters");
    if (!box) return;
    d.dims.forEach(function (dim) {
      var wrap = document.createElement("div");
      wrap.className = "chart-box";
      var canvas = document.createElement("canvas");
      canvas.setAttribute("role", "img");
      canvas.setAttribute("aria-label", dim.name + " against " + d.metric);
      wrap.appendChild(canvas);
      box.appendChild(wrap);
      var points = d.trials.filter(function (t) { return t.value !== null; }).map(function (t) {
        var v = t.params[dim.name];
        return { x: dim.choices ? dim.choices.indexOf(String(v)) : v, y: t.value };
      });
      var x = dim.choices
        ? { type: "linear", min: -0.5, max: dim.choices.length - 0.5, ticks: { stepSize: 1, callback: function (i) { return dim.choices[i]; } } }
        : { type: dim.log ? "logarithmic" : "linear" };
      x.title = { display: true, text: dim.name };
      charts.push(new window.Chart(canvas, {
        type: "scatter",
        data: { datasets: [{ label: d.metric, data: points, backgroundColor: "#b4532a", pointRadius: 4 }] },
        options: {
          responsive: true,
          maintainAspectRatio: false,
          animation: false,
          plugins: { legend: { display: false } },
          scales: { x: x, y: { title: { display: true, text: d.metric } } },
        },
      }));
    });
  }

  function draw() {
    var d = data();
    if (!d || typeof window.Chart === "undefined") return;
    clear();
    parallel(d);
    scatters(d);
  }

  document.addEventListener("htmx:afterSettle", function (e) {
    if (e.target && e.target.id === "sweep-live") draw();
  });
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", draw);
  } else {
    draw();
  }
})();
