"""Authorisation-matrix rows for the gallery, image pages and bytes, bulk actions, classes and
splits (see tests/test_authz_matrix.py).

The public image routes serve only public datasets: the matrix dataset is private, so every
caller, members included, gets 404 there. The public case is tested in test_gallery.py.
"""

from tests.authz import Row, _ws


def _ds(**kw):
    return _ws(pk="@dataset", **kw)


_IMAGE = {"image_pk": "@image"}
_CLASS = {"class_pk": "@dataset_class"}
_PUBLIC = {"pk": "@dataset", "image_pk": "@image"}

ROUTES = [
    Row("dataset_gallery", "get", "viewer", 200, _ds()),
    Row(
        "dataset_images_bulk",
        "post",
        "editor",
        302,
        _ds(),
        {"action": "move", "to_split": "val", "images": "@image"},
    ),
    Row(
        "dataset_images_bulk",
        "post",
        "editor",
        200,
        _ds(),
        {"action": "delete", "images": "@image"},
    ),
    Row("dataset_image_detail", "get", "viewer", 200, _ds(**_IMAGE)),
    Row("dataset_image_file", "get", "viewer", 200, _ds(**_IMAGE)),
    Row("dataset_image_thumb", "get", "viewer", 200, _ds(**_IMAGE)),
    Row(
        "dataset_split_auto",
        "post",
        "editor",
        302,
        _ds(),
        {"train": 80, "val": 20, "test": 0, "seed": 0},
    ),
    Row("dataset_classes", "get", "viewer", 200, _ds()),
    Row("dataset_class_add", "post", "editor", 302, _ds(), {"name": "hawk"}),
    Row("dataset_class_rename", "post", "editor", 302, _ds(**_CLASS), {"name": "raptor"}),
    Row(
        "dataset_class_merge",
        "post",
        "editor",
        302,
        _ds(),
        {"source": "@dataset_class", "into": "@dataset_class"},
    ),
    Row("dataset_class_delete", "get", "editor", 200, _ds(**_CLASS)),
    Row("dataset_class_delete", "post", "editor", 302, _ds(**_CLASS), {"confirm": "bird"}),
    Row("public_image_file", "get", None, 404, _PUBLIC, anonymous=404, stranger=404),
    Row("public_image_thumb", "get", None, 404, _PUBLIC, anonymous=404, stranger=404),
]
