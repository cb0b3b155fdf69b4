// Draws the dataset statistics charts from the JSON the page embeds (json_script "stats-data").
// The same numbers are in the page's tables, so without JavaScript nothing is lost.
(function () {
  "use strict";

  var ACCENT = "#b4532a";
  var ACCENT_FILL = "rgba(180, 83, 42, 0.55)";
  var POINT_FILL = "rgba(180, 83, 42, 0.35)";

  function data() {
    var node = document.getElementById("stats-data");
    if (!node) return null;
    try {
      return JSON.parse(node.textContent);
    } catch (e) {
      return null;
    }
  }

  function canvas(id) {
    var el = document.getElementById(id);
    return el && el.getContext ? el : null;
  }

  function base(extra) {
    var options = {
      responsive: true,
      maintainAspectRatio: false,
      animation: false,
      plugins: { legend: { display: false } },
    };
    return Object.assign(options, extra || {});
  }

  function bar(id, labels, values, title, extra) {
    var el = canvas(id);
    if (!el) return;
    new window.Chart(el, {
      type: "bar",
      data: {
        labels: labels,
        datasets: [{ label: title, data: values, backgroundColor: ACCENT_FILL, borderColor: ACCENT, borderWidth: 1 }],
      },
      options: base(extra),
    });
  }

  function axes(x, y) {
    return {
      scales: {
        x: { title: { display: true, text: x }, beginAtZero: true, ticks: { precision: 0 } },
        y: { title: { display: true, text: y }, beginAtZero: true, ticks: { precision: 0 } },
      },
    };
  }

  function draw() {
    var d = data();
    if (!d || typeof window.Chart === "undefined") return;

    bar(
      "chart-splits",
      d.splits.map(function (s) { return s.name; }),
      d.splits.map(function (s) { return s.images; }),
      "Images",
      axes("Split", "Images")
    );

    bar(
      "chart-labels-per-image",
      d.labels_per_image.map(function (b) { return b.bin; }),
      d.labels_per_image.map(function (b) { return b.images; }),
      "Images",
      axes("Labels on the image", "Images")
    );

    var classes = canvas("chart-classes");
    if (classes && d.classes.length) {
      // One bar per class, tall enough to read every name.
      classes.parentElement.style.height = Math.max(160, 22 * d.classes.length + 60) + "px";
      // Semantic datasets measure a class by its share of the labelled pixels (%).
      var what = d.measure === "share" ? "% of labelled pixels" : "Labels";
      bar(
        "chart-classes",
        d.classes.map(function (c) { return c.name; }),
        d.classes.map(function (c) { return c.labels; }),
        what,
        Object.assign({ indexAxis: "y" }, axes(what, ""))
      );
    }

    bar(
      "chart-box-sizes",
      d.box_histogram.map(function (b) { return b.bin; }),
      d.box_histogram.map(function (b) { return b.boxes; }),
      "Boxes",
      axes("Box size (√(width × height), px)", "Boxes")
    );

    var scatter = canvas("chart-box-scatter");
    if (scatter && d.box_scatter.length) {
      new window.Chart(scatter, {
        type: "scatter",
        data: {
          datasets: [{
            label: "Boxes",
            data: d.box_scatter.map(function (p) { return { x: p[0], y: p[1] }; }),
            backgroundColor: POINT_FILL,
            borderColor: ACCENT,
            pointRadius: 2,
          }],
        },
        options: base(axes("Box width (px)", "Box height (px)")),
      });
    }

    var sizes = canvas("chart-image-sizes");
    if (sizes && d.image_sizes.length) {
      var most = Math.max.apply(null, d.image_sizes.map(function (s) { return s[2]; }));
      new window.Chart(sizes, {
        type: "bubble",
        data: {
          datasets: [{
            label: "Images",
            data: d.image_sizes.map(function (s) {
              return { x: s[0], y: s[1], r: 3 + 12 * Math.sqrt(s[2] / most), n: s[2] };
            }),
            backgroundColor: POINT_FILL,
            borderColor: ACCENT,
          }],
        },
        options: base(Object.assign(axes("Width (px)", "Height (px)"), {
          plugins: {
            legend: { display: false },
            tooltip: {
              callbacks: {
                label: function (ctx) {
                  var p = ctx.raw;
                  return p.x + " × " + p.y + ": " + p.n + (p.n === 1 ? " image" : " images");
                },
              },
            },
          },
        })),
      });
    }
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", draw);
  } else {
    draw();
  }
})();
