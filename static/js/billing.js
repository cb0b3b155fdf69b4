// Draws the billing page's usage chart from the JSON the page embeds (json_script
// "billing-usage-data": days and micro-credits spent). The table under it has the same numbers.
(function () {
  "use strict";

  var MICRO = 1000000;

  function draw() {
    var node = document.getElementById("billing-usage-data");
    var el = document.getElementById("chart-usage");
    if (!node || !el || !el.getContext || !window.Chart) return;
    var data;
    try {
      data = JSON.parse(node.textContent);
    } catch (e) {
      return;
    }
    new window.Chart(el, {
      type: "bar",
      data: {
        labels: data.labels,
        datasets: [
          {
            label: "Credits spent",
            data: data.micro.map(function (m) { return m / MICRO; }),
            backgroundColor: "rgba(180, 83, 42, 0.55)",
            borderColor: "#b4532a",
            borderWidth: 1,
          },
        ],
      },
      options: {
        responsive: true,
        maintainAspectRatio: false,
        animation: false,
        plugins: { legend: { display: false } },
        scales: { y: { beginAtZero: true, title: { display: true, text: "Credits" } } },
      },
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", draw);
  } else {
    draw();
  }
})();
