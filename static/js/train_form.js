// The training form: the "Pretrained weights" choice follows the family, size and task picked,
// as the server can give them (training.forms.TrainForm.pretrained_choices, in the page). The
// server refuses a submit asking for weights it cannot have, with or without this script.
(function () {
  "use strict";

  function init() {
    var data = document.getElementById("pretrained-choices");
    var form = document.getElementById("train-form");
    if (!data || !form) return;
    var choices = JSON.parse(data.textContent);
    var pretrained = form.querySelector('input[name="weights"][value="pretrained"]');
    var scratch = form.querySelector('input[name="weights"][value="scratch"]');
    var note = form.querySelector('[data-testid="pretrained-note"]');
    var watched = { model_family: true, model_size: true, task: true, dataset_version: true };

    function value(name) {
      var field = form.elements[name];
      return field ? field.value : "";
    }

    function update() {
      var task = value("task") || choices.version_tasks[value("dataset_version")] || "detect";
      var key = value("model_family") + " " + value("model_size") + " " + task;
      var found = choices.weights[key];
      if (!found || !pretrained) return;
      pretrained.disabled = !found.available;
      if (!found.available && pretrained.checked && scratch) scratch.checked = true;
      if (note) {
        note.textContent = "Pretrained: " + found.note + ".";
        note.toggleAttribute("data-unavailable", !found.available);
      }
    }

    form.addEventListener("change", function (event) {
      if (watched[event.target.name]) update();
    });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
