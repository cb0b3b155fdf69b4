// "Train on your own machine": the Copy buttons. The page works without this (select the text).
(function () {
  "use strict";

  function flash(button, text) {
    button.textContent = text;
    window.setTimeout(function () { button.textContent = "Copy"; }, 1800);
  }

  function copyFallback(button, node) {
    var range = document.createRange();
    range.selectNodeContents(node);
    var selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
    var ok = false;
    try {
      ok = document.execCommand("copy");
    } catch (e) {
      ok = false;
    }
    flash(button, ok ? "Copied" : "Press Ctrl+C");
  }

  // Delegated: the blocks are swapped by htmx, their buttons with them.
  document.addEventListener("click", function (event) {
    var button = event.target.closest("[data-copy]");
    if (!button) return;
    var node = document.getElementById(button.dataset.copy);
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
})();
