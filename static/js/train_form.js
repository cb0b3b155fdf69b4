// The training form, as the server described it (training.forms.TrainForm.pretrained_choices,
// in the page):
// - the "Pretrained weights" choice follows the family, size and task picked; it is picked by
//   itself only for weights a job will surely get (on the server, or a download whose source
//   answered), until the person picks the weights;
// - a recipe (training/recipes.py) fills the training fields when picked; until the person
//   picks one or types in those fields, the recipe follows the version's size and the weights.
// The server checks whatever is submitted, with or without this script.
(function () {
  "use strict";

  var RECIPE_FIELDS = ["epochs", "imgsz", "batch", "patience", "optimizer", "extra_args"];

  function init() {
    var data = document.getElementById("pretrained-choices");
    var form = document.getElementById("train-form");
    if (!data || !form) return;
    var choices = JSON.parse(data.textContent);
    var pretrained = form.querySelector('input[name="weights"][value="pretrained"]');
    var scratch = form.querySelector('input[name="weights"][value="scratch"]');
    var note = form.querySelector('[data-testid="pretrained-note"]');
    var watched = { model_family: true, model_size: true, task: true, dataset_version: true };
    var weightsPicked = false; // the person chose the weights: the form stops choosing
    var recipePicked = false; // the person chose a recipe or typed a value it sets
    var filling = false;

    function value(name) {
      var field = form.elements[name];
      return field ? field.value : "";
    }

    function weightsUpdate() {
      var task = value("task") || choices.version_tasks[value("dataset_version")] || "detect";
      var key = value("model_family") + " " + value("model_size") + " " + task;
      var found = choices.weights[key];
      if (!found || !pretrained) return;
      pretrained.disabled = !found.available;
      if (!found.available && pretrained.checked && scratch) scratch.checked = true;
      else if (!weightsPicked && scratch) {
        pretrained.checked = found.ready;
        scratch.checked = !found.ready;
      }
      if (note) {
        note.textContent = "Pretrained: " + found.note + ".";
        note.toggleAttribute("data-unavailable", !found.available);
      }
    }

    function trainImages() {
      return choices.version_train_images[value("dataset_version")] || 0;
    }

    function recipeFill(slug) {
      var recipe = choices.recipes[slug];
      if (!recipe) return;
      var images = trainImages();
      RECIPE_FIELDS.forEach(function (name) {
        var field = form.elements[name];
        if (!field) return;
        var filled = recipe.fields[name];
        if (name === "batch" && recipe.batch > 0 && images > 0) {
          filled = String(Math.min(recipe.batch, images)); // never more than the images
        }
        field.value = filled;
      });
      // The estimates follow the fields (htmx listens for a change on the form).
      filling = true;
      try {
        form.elements.epochs.dispatchEvent(new Event("change", { bubbles: true }));
      } finally {
        filling = false;
      }
    }

    function recipeDefault() {
      var weights = value("weights");
      if (weights === "pretrained" || weights === "model") return "fine-tune";
      return trainImages() <= choices.small_dataset_images ? "small-scratch" : "defaults";
    }

    function recipeFollow(versionChanged) {
      if (recipePicked) return;
      var slug = recipeDefault();
      var radio = form.querySelector('input[name="recipe"][value="' + slug + '"]');
      // Filled again for a new version too: its batch is capped by its images.
      if (!radio || (radio.checked && !versionChanged)) return;
      radio.checked = true;
      recipeFill(slug);
    }

    form.addEventListener("change", function (event) {
      var name = event.target.name;
      if (filling) return; // this script's own change, for the estimates
      if (name === "weights") weightsPicked = true;
      if (name === "recipe") {
        recipePicked = true;
        recipeFill(event.target.value);
      }
      if (RECIPE_FIELDS.indexOf(name) >= 0) recipePicked = true;
      if (watched[name]) weightsUpdate();
      if (watched[name] || name === "weights") recipeFollow(name === "dataset_version");
    });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
