// Draws the compare page's overlay charts, one line per run, from the JSON the page embeds
// (json_script "compare-data"). The runs' colours match the swatches of compare.css (c0…c7).
(function () {
  "use strict";

  var COLORS = ["#b4532a", "#1d4f91", "#1f7a3d", "#7a3fa0", "#c28a00", "#0f7c86", "#d6336c", "#55524c"];

  function data() {
    var node = document.getElementById("compare-data");
    if (!node) return null;
    try {
      return JSON.parse(node.textContent);
    } catch (e) {
      return null;
    }
  }

  function lines(id, runs, key, title) {
    var el = document.getElementById(id);
    if (!el || !el.getContext) return;
    new window.Chart(el, {
      type: "line",
      data: {
        datasets: runs.map(function (run, i) {
          var color = COLORS[i % COLORS.length];
          return {
            label: run.label,
            data: run.epochs.map(function (epoch, j) { return { x: epoch, y: run[key][j] }; }),
            borderColor: color,
            backgroundColor: color,
            borderWidth: 2,
            pointRadius: 2,
            tension: 0.15,
            spanGaps: true,
          };
        }),
      },
      options: {
        responsive: true,
        maintainAspectRatio: false,
        animation: false,
        interaction: { mode: "nearest", axis: "x", intersect: false },
        plugins: { legend: { position: "bottom" } },
        scales: {
          x: { type: "linear", title: { display: true, text: "Epoch" }, ticks: { precision: 0 } },
          y: { title: { display: true, text: title } },
        },
      },
    });
  }

  function draw() {
    var d = data();
    if (!d || typeof window.Chart === "undefined") return;
    lines("chart-metric", d.runs, "metric", d.metric_label);
    lines("chart-val-loss", d.runs, "val_loss", "Validation loss");
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", draw);
  } else {
    draw();
  }
})();
