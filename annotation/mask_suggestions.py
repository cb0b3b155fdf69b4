"""A semantic model's mask suggestions decided in the editor: the painted mask and the
suggestions it accepted or rejected are saved in one commit, as labels_save does for shapes."""

from django.db import transaction

from annotation.masks import mask_save
from annotation.models import MASK_KIND, Suggestion
from datasets.models import Image
from workspaces.selectors import WorkspaceAccess


@transaction.atomic
def mask_save_deciding(
    *, access: WorkspaceAccess, image: Image, revision, png: bytes, decided: list[int] = ()
) -> Image:
    """Save the mask (annotation.masks.mask_save: revision-checked, nothing written when it
    refuses) and drop the image's mask suggestions in `decided`: accepted ones are in the mask
    now, rejected ones are not wanted. Ids of other images' suggestions are passed over."""
    saved = mask_save(access=access, image=image, revision=revision, png=png)
    if decided:
        Suggestion.objects.filter(image=saved, kind=MASK_KIND, pk__in=decided).delete()
    return saved
