// Gallery niceties on top of pages that work without JavaScript:
// "select all on this page" ticks the boxes, shift-click ticks a range, a count of the ticked,
// and the arrow keys go to the previous / next image on an image page.
(function () {
  "use strict";

  function setupSelection(form) {
    var all = form.querySelector("[data-select-all]");
    var boxes = Array.prototype.slice.call(form.querySelectorAll("input[name=images]"));
    var counter = form.querySelector("[data-selected-count]");
    var last = null;

    function refresh() {
      var ticked = boxes.filter(function (b) { return b.checked; }).length;
      if (counter) counter.textContent = ticked ? ticked + " selected" : "";
      if (all) {
        all.checked = ticked === boxes.length && ticked > 0;
        all.indeterminate = ticked > 0 && ticked < boxes.length;
      }
    }

    if (all) {
      all.addEventListener("change", function () {
        boxes.forEach(function (b) { b.checked = all.checked; });
        refresh();
      });
    }
    boxes.forEach(function (box, i) {
      box.addEventListener("click", function (event) {
        if (event.shiftKey && last !== null && last !== i) {
          var lo = Math.min(last, i), hi = Math.max(last, i);
          for (var j = lo; j <= hi; j++) boxes[j].checked = box.checked;
        }
        last = i;
        refresh();
      });
    });
    refresh();
  }

  function setupKeys() {
    document.addEventListener("keydown", function (event) {
      if (event.altKey || event.ctrlKey || event.metaKey || event.shiftKey) return;
      var target = event.target;
      if (target && /^(INPUT|SELECT|TEXTAREA)$/.test(target.tagName)) return;
      var rel = event.key === "ArrowLeft" ? "prev" : event.key === "ArrowRight" ? "next" : null;
      if (!rel) return;
      var link = document.querySelector(".imagenav a[rel=" + rel + "], .pagination a[rel=" + rel + "]");
      if (link) window.location.href = link.href;
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var form = document.getElementById("bulk");
    if (form) setupSelection(form);
    setupKeys();
  });
})();
