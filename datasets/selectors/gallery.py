"""The gallery's reads: filtered keyset pages of images with their label overlays, one image's
details, and how names and classes are shown (the writes: datasets.services.gallery).
"""

import json
import math
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlencode

from django.apps import apps
from django.db import connections
from django.db.models import Prefetch, QuerySet
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from datasets.models import (
    PIXEL_TASKS,
    Dataset,
    DatasetClass,
    HealthFinding,
    Image,
    Label,
    LabelKind,
    LabelStatus,
    Split,
    Task,
)

PAGE_SIZE = 60
# Up to this many matching images are counted exactly (reading at most this many + 1 rows);
# past it the gallery shows PostgreSQL's estimate, said to be one. Counting all of a million
# images took most of a page's time (bench/gallery.py: 297 ms, 1,171 ms by class, loaded);
# counting 10,001 by class still read 50,001 images (63 ms), 1,001 read a tenth of that.
EXACT_COUNT_MAX = 1_000
TILE_PX = 180  # the box a gallery thumbnail is shown in, CSS pixels
_NON_SCALING = 'vector-effect="non-scaling-stroke"'
# Stroke colours by class index: distinct on photos and on each other, light and dark.
PALETTE = (
    "#ff3b30 #ffcc00 #34c759 #00c7be #32ade6 #5856d6 #ff2d92 #ff9500"
    " #a2845e #8e8e93 #30d158 #bf5af2 #64d2ff #ffd60a #ff6961 #0a84ff"
).split()
# Characters that change how text around them is shown (bidi overrides, zero-width, controls).
_INVISIBLE = ("Cc", "Cf", "Zl", "Zp")


def class_colour(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def filename_display(name: str) -> str:
    """The uploaded name with invisible and direction-changing characters made visible, so
    "photo\u202egpj.exe" cannot pass for something else. HTML escaping is the template's job."""
    return "".join(
        f"\\u{ord(ch):04x}" if unicodedata.category(ch) in _INVISIBLE else ch for ch in name
    )


# --- filters and pages ------------------------------------------------------------------------


def _positive_int(value) -> int | None:
    try:
        number = int(str(value))
    except (TypeError, ValueError):
        return None
    return number if 0 < number < 2**63 else None


@dataclass(frozen=True)
class GalleryFilter:
    """What the gallery shows, from its query string; unknown values are ignored."""

    split: str = ""
    class_id: int | None = None
    labelled: str = ""  # "yes", "no" or "" for both
    problems: bool = False
    problem: int | None = None  # one health finding: only the images it names
    status: str = ""  # a LabelStatus value, or "" for all
    mask: str = ""  # semantic / depth: "yes" (has its map), "no", or "" for both
    evaluation: int | None = None  # one evaluation's worst images (evaluations.Evaluation)

    @classmethod
    def from_query(cls, params: Mapping) -> "GalleryFilter":
        split = params.get("split", "")
        labelled = params.get("labelled", "")
        mask = params.get("mask", "")
        return cls(
            mask=mask if mask in ("yes", "no") else "",
            split=split if split in Split.values else "",
            class_id=_positive_int(params.get("class")),
            labelled=labelled if labelled in ("yes", "no") else "",
            problems=params.get("problems") in ("1", "on", "yes"),
            problem=_positive_int(params.get("problem")),
            status=status if (status := params.get("status", "")) in LabelStatus.values else "",
            evaluation=_positive_int(params.get("evaluation")),
        )

    def params(self) -> dict[str, str]:
        out = {}
        if self.split:
            out["split"] = self.split
        if self.class_id:
            out["class"] = str(self.class_id)
        if self.labelled:
            out["labelled"] = self.labelled
        if self.problems:
            out["problems"] = "1"
        if self.problem:
            out["problem"] = str(self.problem)
        if self.status:
            out["status"] = self.status
        if self.mask:
            out["mask"] = self.mask
        if self.evaluation:
            out["evaluation"] = str(self.evaluation)
        return out

    @property
    def querystring(self) -> str:
        return urlencode(self.params())

    @property
    def active(self) -> bool:
        return bool(self.params())

    @property
    def estimable(self) -> bool:
        """Whether PostgreSQL's estimate of the matching images can be shown as "about": one
        kind of condition at most (split and status count as one: migration 0006 gave them joint
        statistics). Across kinds the planner multiplies their shares as if independent, and a
        class that is all in val (say) is then estimated at a fraction of its size."""
        kinds = [
            bool(self.split or self.status),
            bool(self.class_id),
            bool(self.labelled),
            bool(self.mask),
            bool(self.problems),
            bool(self.problem),
            bool(self.evaluation),
        ]
        return sum(kinds) <= 1

    def apply(
        self,
        queryset: QuerySet[Image],
        *,
        dataset: Dataset,
        id_gt: int | None = None,
        id_lt: int | None = None,
    ) -> QuerySet[Image]:
        """The images that pass the filter, with ids in (id_gt, id_lt) when given."""
        return self.keyset(dataset=dataset)(queryset, id_gt=id_gt, id_lt=id_lt)

    def keyset(
        self, *, dataset: Dataset, classes: dict[int, DatasetClass] | None = None
    ) -> Callable[..., QuerySet[Image]]:
        """apply() for the several bounded queries of one page, the findings read once. A
        keyset bound goes into the class's labels too, so the (class, image) index is read
        from the page on instead of from the class's first image. A semantic dataset has no
        label rows: there a class matches the masks it occurs in (PixelMap.stats' keys);
        `classes` (by id), when the caller has them, saves looking the class's index up."""
        problems = problem_image_ids(dataset=dataset) if self.problems else None
        mask_class = None
        if self.class_id and dataset.task == Task.SEMANTIC:
            if classes is not None:
                found = classes.get(self.class_id)
                mask_class = str(found.index) if found else ""
            else:
                index = (
                    DatasetClass.objects.filter(dataset=dataset, pk=self.class_id)
                    .values_list("index", flat=True)
                    .first()
                )
                mask_class = "" if index is None else str(index)
        one_finding = (
            problem_image_ids(dataset=dataset, finding_id=self.problem) if self.problem else None
        )
        worst = (
            evaluation_image_ids(dataset=dataset, evaluation_id=self.evaluation)
            if self.evaluation
            else None
        )

        def bounded(
            queryset: QuerySet[Image], *, id_gt: int | None = None, id_lt: int | None = None
        ) -> QuerySet[Image]:
            if id_gt is not None:
                queryset = queryset.filter(pk__gt=id_gt)
            if id_lt is not None:
                queryset = queryset.filter(pk__lt=id_lt)
            if self.split:
                queryset = queryset.filter(split=self.split)
            if mask_class is not None:
                if not mask_class:  # not a class of this dataset: nothing matches
                    return queryset.none()
                queryset = queryset.filter(pixel_map__stats__has_key=mask_class)
            elif self.class_id:
                # A semi-join on the class's labels, read from the (class, image) index in
                # image order: a page reads about a page of them, wherever it is.
                labels = Label.objects.filter(dataset_class_id=self.class_id)
                if id_gt is not None:
                    labels = labels.filter(image_id__gt=id_gt)
                if id_lt is not None:
                    labels = labels.filter(image_id__lt=id_lt)
                queryset = queryset.filter(pk__in=labels.values("image_id"))
            if self.labelled == "yes":
                queryset = queryset.filter(label_count__gt=0)
            elif self.labelled == "no":
                queryset = queryset.filter(label_count=0)
            if self.status:
                queryset = queryset.filter(status=self.status)
            if self.mask:
                queryset = queryset.filter(pixel_map__isnull=self.mask == "no")
            if problems is not None:
                queryset = queryset.filter(pk__in=problems)
            if one_finding is not None:
                queryset = queryset.filter(pk__in=one_finding)
            if worst is not None:
                queryset = queryset.filter(pk__in=worst)
            return queryset

        return bounded


def problem_image_ids(*, dataset: Dataset, finding_id: int | None = None) -> set[int]:
    """Images named by the last health check's findings (or by one of them)."""
    ids: set[int] = set()
    findings = HealthFinding.objects.filter(dataset=dataset)
    if finding_id is not None:
        findings = findings.filter(pk=finding_id)
    for image_ids in findings.values_list("image_ids", flat=True):
        ids.update(i for i in image_ids or [] if isinstance(i, int))
    return ids


def gallery_evaluation(*, dataset: Dataset, evaluation_id: int | None):
    """The evaluation a gallery is filtered to: one of a version of this dataset, in the
    dataset's own workspace; another workspace's id, like an unknown one, is None (and its
    filter shows no image). Looked up by name: evaluations build on datasets, not the reverse."""
    if not evaluation_id:
        return None
    evaluation_model = apps.get_model("evaluations", "Evaluation")
    return (
        evaluation_model.objects.for_workspace(dataset.workspace_id)
        .filter(pk=evaluation_id, dataset_version__dataset=dataset)
        .select_related("model", "dataset_version")
        .first()
    )


def evaluation_image_ids(*, dataset: Dataset, evaluation_id: int) -> set[int]:
    """The images an evaluation listed as its worst (those still in the dataset)."""
    evaluation_model = apps.get_model("evaluations", "Evaluation")
    rows = (
        evaluation_model.objects.for_workspace(dataset.workspace_id)
        .filter(pk=evaluation_id, dataset_version__dataset=dataset)
        .values_list("worst_images", flat=True)
        .first()
    )
    ids = {row.get("image_id") for row in rows or [] if isinstance(row, dict)}
    return {i for i in ids if isinstance(i, int) and not isinstance(i, bool)}


@dataclass
class Shape:
    """One label as the SVG overlay draws it, in the 0..1 coordinates of the image."""

    name: str
    colour: str
    kind: str
    rect: tuple[str, str, str, str] | None = None  # x, y, width, height
    points: str = ""  # polygon / oriented box: "x1,y1 x2,y2 ..."
    dots: str = ""  # keypoints as a path of zero-length segments (drawn as round dots)


@dataclass(frozen=True)
class ImageCount:
    """How many images match: counted; PostgreSQL's estimate when counting would be slow; or,
    where the estimate cannot be right, only that there are more than were counted."""

    value: int
    exact: bool
    more_than: bool = False  # value is how many were counted, and there are more

    def __str__(self) -> str:
        return self.text

    @property
    def text(self) -> str:
        """What the page says: 1,234; about 1,200,000 (two significant figures); more than
        10,000."""
        if self.exact:
            return f"{self.value:,}"
        if self.more_than:
            return f"more than {self.value:,}"
        return f"about {int(float(f'{self.value:.2g}')):,}"

    @property
    def note(self) -> str:
        if self.more_than:
            return (
                f"Counted up to {self.value:,}: counting them all on every page would slow the "
                "gallery down, and the database's statistics cannot say about how many there "
                "are for these filters (or are older than these images)."
            )
        return (
            "An estimate from the database's statistics: counting this many images exactly "
            "on every page would slow the gallery down."
        )


def _planner_rows(queryset: QuerySet) -> int | None:
    """PostgreSQL's estimate of the rows a query returns, from its statistics (a plan, not a
    run: well under a millisecond); None on databases that give none (SQLite)."""
    connection = connections[queryset.db]
    if connection.vendor != "postgresql":
        return None
    sql, params = queryset.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
        plan = cursor.fetchone()[0]
    if isinstance(plan, str):
        plan = json.loads(plan)
    return int(plan[0]["Plan"]["Plan Rows"])


def image_count(
    queryset: QuerySet[Image], *, exact_max: int | None = None, estimable: bool = True
) -> ImageCount:
    """Exact when at most `exact_max` images match (reading at most that many + 1); past it the
    planner's estimate, or where there is none (SQLite) an exact count all the same. An
    estimate of at most `exact_max`, when more were just read, cannot be right (statistics
    older than a big import, or filters the planner takes as independent that are not): then
    "more than `exact_max`", which is true, instead of counting everything; likewise where the
    caller knows the estimate would not be (`estimable`, see GalleryFilter.estimable)."""
    cap = EXACT_COUNT_MAX if exact_max is None else exact_max
    queryset = queryset.order_by().values("pk")
    counted = queryset[: cap + 1].count()
    if counted <= cap:
        return ImageCount(counted, exact=True)
    estimate = _planner_rows(queryset)
    if estimate is None:
        return ImageCount(queryset.count(), exact=True)
    if estimate <= cap or not estimable:
        return ImageCount(cap, exact=False, more_than=True)
    return ImageCount(estimate, exact=False)


@dataclass
class GalleryPage:
    images: list[Image]
    count: ImageCount
    has_previous: bool
    has_next: bool
    classes: dict[int, DatasetClass] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return self.count.value

    @property
    def first_id(self) -> int | None:
        return self.images[0].pk if self.images else None

    @property
    def last_id(self) -> int | None:
        return self.images[-1].pk if self.images else None


def _num(value) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _fmt(number: float) -> str:
    return f"{number:.5f}".rstrip("0").rstrip(".") or "0"


def _numbers(data) -> list[float] | None:
    if not isinstance(data, list):
        return None
    numbers = [_num(v) for v in data]
    return None if any(n is None for n in numbers) else numbers


def _pairs(numbers: list[float]) -> str:
    return " ".join(
        f"{_fmt(x)},{_fmt(y)}" for x, y in zip(numbers[::2], numbers[1::2], strict=False)
    )


def label_shape(
    label: Label, dataset_class: DatasetClass | None, *, keypoint_dims: int | None = None
) -> Shape | None:
    """The overlay shape of a label, or None for tags and for data that is not a valid shape."""
    name = dataset_class.name if dataset_class else "?"
    colour = class_colour(dataset_class.index if dataset_class else 0)
    shape = Shape(name=name, colour=colour, kind=label.kind)
    numbers = _numbers(label.data)
    if numbers is None:
        return None
    if label.kind in (LabelKind.BOX, LabelKind.KEYPOINTS):
        if len(numbers) < 4:
            return None
        cx, cy, w, h = numbers[:4]
        if w < 0 or h < 0:
            return None
        shape.rect = (_fmt(cx - w / 2), _fmt(cy - h / 2), _fmt(w), _fmt(h))
        if label.kind == LabelKind.KEYPOINTS:
            shape.dots = _keypoint_path(numbers[4:], keypoint_dims)
        return shape
    if label.kind in (LabelKind.POLYGON, LabelKind.OBB):
        if len(numbers) < 6 or len(numbers) % 2:
            return None
        shape.points = _pairs(numbers)
        return shape
    return None


def _keypoint_dims(numbers: list[float], dims: int | None) -> int:
    """2 ([x, y] per point) or 3 ([x, y, visibility]): the dataset's keypoint shape says; else
    guessed from the count and from visibilities being 0, 1 or 2."""
    if dims in (2, 3):
        return dims
    by_three = len(numbers) % 3 == 0 and all(v in (0, 1, 2) for v in numbers[2::3])
    return 3 if by_three and (len(numbers) % 2 or len(numbers) >= 6) else 2


def _keypoint_path(numbers: list[float], dims: int | None) -> str:
    dims = _keypoint_dims(numbers, dims)
    parts = []
    for i in range(0, len(numbers) - dims + 1, dims):
        x, y = numbers[i], numbers[i + 1]
        if (dims == 3 and numbers[i + 2] == 0) or (x == 0 and y == 0):
            continue  # not labelled
        parts.append(f"M{_fmt(x)} {_fmt(y)}h0")
    return "".join(parts)


def overlay_svg(shapes: list[Shape]) -> SafeString:
    """The SVG drawn over an image or a tile: each shape in its class colour, titled with its
    class name (escaped), in the image's 0..1 coordinates. Built here rather than by template
    loops: a gallery page draws hundreds of shapes, and they were most of its rendering time.
    Only the name comes from a user; coordinates are numbers formatted here, colours ours."""
    if not shapes:
        return SafeString("")
    parts = []
    for s in shapes:
        parts.append(f'<g stroke="{s.colour}" fill="{s.colour}"><title>{escape(s.name)}</title>')
        if s.rect:
            x, y, w, h = s.rect
            parts.append(f'<rect x="{x}" y="{y}" width="{w}" height="{h}" {_NON_SCALING}/>')
        if s.points:
            parts.append(f'<polygon points="{s.points}" {_NON_SCALING}/>')
        if s.dots:
            parts.append(f'<path class="kp" d="{s.dots}" {_NON_SCALING}/>')
        parts.append("</g>")
    return mark_safe(  # noqa: S308 - the name is escaped above; the rest is ours
        '<svg class="overlay" viewBox="0 0 1 1" preserveAspectRatio="none" aria-hidden="true">'
        + "".join(parts)
        + "</svg>"
    )


def _label_prefetch() -> Prefetch:
    return Prefetch(
        "labels",
        queryset=Label.objects.only("id", "image_id", "dataset_class_id", "kind", "data"),
    )


def _decorate(
    images: Iterable[Image], classes: dict[int, DatasetClass], dataset: Dataset
) -> list[Image]:
    """Attach what templates draw: shapes, tag names and the safe name."""
    shape = dataset.keypoint_shape
    dims = shape[1] if isinstance(shape, list) and len(shape) == 2 else None
    out = []
    for image in images:
        labels = list(image.labels.all())
        image.shapes = [
            s
            for s in (
                label_shape(lb, classes.get(lb.dataset_class_id), keypoint_dims=dims)
                for lb in labels
            )
            if s is not None
        ]
        image.overlay = overlay_svg(image.shapes)
        image.tags = [
            classes[lb.dataset_class_id].name
            for lb in labels
            if lb.kind == LabelKind.TAG and lb.dataset_class_id in classes
        ]
        image.display_name = filename_display(image.filename)
        image.tile_w, image.tile_h = fit(image.blob, TILE_PX)
        image.mask_sha = _mask_sha(image) if dataset.task in PIXEL_TASKS else None
        out.append(image)
    return out


def _mask_sha(image: Image) -> str | None:
    """The image's map's blob hash when it has one (loaded with select_related)."""
    try:
        return image.pixel_map.blob.sha256
    except Image.pixel_map.RelatedObjectDoesNotExist:
        return None


def fit(blob, box: int) -> tuple[int, int]:
    """Width and height to show an image at inside a square box, aspect ratio kept."""
    width, height = max(1, blob.width), max(1, blob.height)
    scale = box / max(width, height)
    return max(1, round(width * scale)), max(1, round(height * scale))


def dataset_classes(*, dataset: Dataset) -> dict[int, DatasetClass]:
    return {c.pk: c for c in DatasetClass.objects.filter(dataset=dataset).order_by("index")}


def gallery_page(
    *,
    dataset: Dataset,
    flt: GalleryFilter,
    after: int | None = None,
    before: int | None = None,
    size: int = PAGE_SIZE,
    classes: dict[int, DatasetClass] | None = None,
) -> GalleryPage:
    """One page of the filtered images in id order, by keyset: `after` an id (the next page) or
    `before` one (the previous page). A fixed number of queries, whatever the page size, and
    about a page of rows read wherever the page is (see GalleryFilter.apply, image_count)."""
    classes = dataset_classes(dataset=dataset) if classes is None else classes
    base = Image.objects.filter(dataset=dataset)
    bounded = flt.keyset(dataset=dataset, classes=classes)
    # A mask or depth map is one join more on the page's own query, never a query per tile.
    related = ("blob", "pixel_map__blob") if dataset.task in PIXEL_TASKS else ("blob",)

    def matching(**bounds) -> QuerySet[Image]:
        return bounded(base, **bounds)

    def rows(**bounds) -> QuerySet[Image]:
        return matching(**bounds).select_related(*related).prefetch_related(_label_prefetch())

    if before is not None:
        images = list(rows(id_lt=before).order_by("-pk")[: size + 1])
        has_previous = len(images) > size
        images = images[:size][::-1]
        has_next = bool(images) and matching(id_gt=images[-1].pk).exists()
    else:
        images = list(rows(id_gt=after).order_by("pk")[: size + 1])
        has_next = len(images) > size
        images = images[:size]
        has_previous = after is not None and bool(images) and matching(id_lt=images[0].pk).exists()
    return GalleryPage(
        images=_decorate(images, classes, dataset),
        count=image_count(matching(), estimable=flt.estimable),
        has_previous=has_previous,
        has_next=has_next,
        classes=classes,
    )


def image_detail(*, dataset: Dataset, image: Image, flt: GalleryFilter) -> dict:
    """One image with its shapes and labels, and its neighbours within the same filter."""
    classes = dataset_classes(dataset=dataset)
    related = ("blob", "pixel_map__blob") if dataset.task in PIXEL_TASKS else ("blob",)
    image = (
        Image.objects.filter(pk=image.pk)
        .select_related(*related)
        .prefetch_related(_label_prefetch())
        .get()
    )
    _decorate([image], classes, dataset)
    base = Image.objects.filter(dataset=dataset)
    bounded = flt.keyset(dataset=dataset, classes=classes)
    previous = bounded(base, id_lt=image.pk).order_by("-pk").values_list("pk", flat=True)
    following = bounded(base, id_gt=image.pk).order_by("pk").values_list("pk", flat=True)
    labels = [
        {
            "name": classes[lb.dataset_class_id].name if lb.dataset_class_id in classes else "?",
            "colour": class_colour(
                classes[lb.dataset_class_id].index if lb.dataset_class_id in classes else 0
            ),
            "kind": lb.get_kind_display(),
            "coords": _coords_text(lb.data),
        }
        for lb in image.labels.all()
    ]
    return {
        "image": image,
        "labels": labels,
        "previous_id": previous.first(),
        "next_id": following.first(),
    }


def _coords_text(data, limit: int = 16) -> str:
    numbers = _numbers(data)
    if numbers is None:
        return "(not a list of numbers)"
    text = ", ".join(f"{n:.3f}" for n in numbers[:limit])
    if len(numbers) > limit:
        text += f", … ({len(numbers)} numbers)"
    return text
