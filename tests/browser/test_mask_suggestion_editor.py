"""A semantic model's suggested mask in the editor, in chromium: shown striped and unsaved,
discarded with Esc, accepted per class (undone and redone) and whole with Enter, filling only
the pixels with no class yet; the save stores exactly that mask and removes the suggestions.

The suggestions are rows as a pre-labelling run leaves them (tests/annotation/
test_mask_suggestions.py runs the real model); here the editor's side is what is tested."""

import numpy as np
import pytest

from annotation.assist.predict import mask_rle
from annotation.models import MASK_KIND, Suggestion
from datasets.models import Image, LabelStatus, PixelMap
from datasets.services.pixel_maps import pixel_map_load, pixel_map_save
from tests.browser.helpers import editor_open, editor_saved, log_in
from tests.browser.test_mask_editor import MASKS_READY, _photo
from tests.datasets.factories import DatasetClassFactory, DatasetFactory, ImageFactory, blob_for
from tests.training.factories import trained_model_row
from tests.workspaces.factories import MembershipFactory, UserFactory, WorkspaceFactory
from workspaces.models import Role

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

W, H = 320, 240


def _region(y0, y1, x0, x1) -> np.ndarray:
    mask = np.zeros((H, W), bool)
    mask[y0:y1, x0:x1] = True
    return mask


def test_a_suggested_mask_is_discarded_accepted_per_class_and_whole(
    new_page, browser_problems, plans
):
    workspace = WorkspaceFactory(name="Raptor Lab", slug="raptor-lab")
    editor = UserFactory(email="editor@raptor.test")
    MembershipFactory(workspace=workspace, user=editor, role=Role.EDITOR)
    dataset = DatasetFactory(workspace=workspace, task="semantic", name="Streets")
    road, car, sign = (
        DatasetClassFactory(dataset=dataset, index=i, name=name)
        for i, name in enumerate(["road", "car", "sign"])
    )
    image = ImageFactory(dataset=dataset, blob=blob_for(_photo(W, H)))
    painted = np.full((H, W), 255, np.uint8)
    painted[50:70, 50:70] = sign.index  # a person's work, inside the car the model proposes
    pixel_map_save(image=image, array=painted, user=editor)  # revision 1
    model = trained_model_row(
        workspace=workspace, class_names=["road", "car", "sign"], task="semantic"
    )
    regions = {road: _region(160, 240, 0, W), car: _region(40, 120, 40, 160)}
    rows = {
        cls: Suggestion.objects.create(
            image=image,
            dataset_class=cls,
            model=model,
            kind=MASK_KIND,
            data=mask_rle(region),
            confidence=float(region.mean()),
        )
        for cls, region in regions.items()
    }
    page = new_page("mask suggestion")
    log_in(page, editor.email)
    url = f"/w/raptor-lab/datasets/{dataset.pk}/images/{image.pk}/annotate/"
    editor_open(page, url)
    page.wait_for_function(MASKS_READY)

    def proposal() -> set[int]:
        return {row["class_id"] for row in page.evaluate("window.kestrelMasks.proposal()")}

    def at(x, y) -> tuple[int, int]:
        """(the mask's value, the suggestion's) at image pixel (x, y)."""
        masks = "window.kestrelMasks"
        return tuple(
            page.evaluate(f"([x, y]) => [{masks}.at(x, y), {masks}.proposedAt(x, y)]", [x, y])
        )

    assert proposal() == {road.pk, car.pk} and page.is_visible("[data-testid=mask-proposal]")
    assert at(100, 100) == (255, car.index) and at(10, 200) == (255, road.index)
    assert at(60, 60) == (sign.index, car.index)

    # Esc discards it from view; with nothing painted nothing is saved, so it comes back.
    page.keyboard.press("Escape")
    assert proposal() == set() and not page.is_visible("[data-testid=mask-proposal]")
    assert at(100, 100) == (255, 255)
    editor_open(page, url)
    page.wait_for_function(MASKS_READY)
    assert proposal() == {road.pk, car.pk}

    # Per class: road's Accept fills its rows; undo offers it again, redo takes it again.
    page.click(f"li[data-suggestion-id='{rows[road].pk}'] [data-testid=mask-suggestion-accept]")
    assert proposal() == {car.pk} and at(10, 200) == (road.index, 255)
    page.keyboard.press("Control+z")
    assert proposal() == {road.pk, car.pk} and at(10, 200) == (255, road.index)
    page.keyboard.press("Control+Shift+z")
    assert proposal() == {car.pk} and at(10, 200) == (road.index, 255)

    # Enter takes the rest: the car fills the pixels with no class; the painted sign stays.
    page.keyboard.press("Enter")
    assert proposal() == set() and at(100, 100) == (car.index, 255)
    assert at(60, 60) == (sign.index, 255)
    editor_saved(page, 2)
    expected = painted.copy()
    expected[regions[road]] = road.index
    expected[regions[car] & (painted == 255)] = car.index
    assert (pixel_map_load(PixelMap.objects.get(image=image)) == expected).all()
    assert not Suggestion.objects.filter(image=image).exists(), "accepted: removed in the save"
    assert Image.objects.get(pk=image.pk).status == LabelStatus.LABELLED
    assert not browser_problems.console_errors, browser_problems.console_errors
    assert not browser_problems.page_errors, browser_problems.page_errors
