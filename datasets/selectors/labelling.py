"""A dataset's labelling progress: images per review status, and who labelled and reviewed how
many. Read by the dataset page and the labelling page."""

from django.db.models import Count, Q

from datasets.models import Dataset, Image, LabelStatus
from datasets.selectors.counts import dataset_image_count, status_counts


def labelling_progress(*, dataset: Dataset) -> dict:
    """How many images are in each status, and who labelled and reviewed how many. Counts are
    exact up to EXACT_COUNT_MAX and estimated past it (datasets.selectors.counts): `count`,
    `total` and `done` are numbers for the bars, the `*_text` what the page says."""
    images = Image.objects.filter(dataset=dataset)
    by_status = status_counts(dataset=dataset)
    total = dataset_image_count(dataset=dataset)
    statuses = [
        {
            "value": value,
            "label": label,
            "count": by_status[value].value,
            "count_text": by_status[value].text,
            "exact": by_status[value].exact,
            # A count known only to be over the cap has no share to show.
            "percent": None
            if by_status[value].more_than
            else (round(100 * by_status[value].value / total.value) if total.value else 0),
        }
        for value, label in LabelStatus.choices
    ]
    labellers = (
        images.filter(labelled_by__isnull=False)
        .values("labelled_by__email")
        .annotate(
            labelled=Count("id"),
            approved=Count("id", filter=Q(status=LabelStatus.APPROVED)),
            rejected=Count("id", filter=Q(status=LabelStatus.REJECTED)),
        )
        .order_by("-labelled", "labelled_by__email")
    )
    reviewers = (
        images.filter(reviewed_by__isnull=False)
        .values("reviewed_by__email")
        .annotate(
            approved=Count("id", filter=Q(status=LabelStatus.APPROVED)),
            rejected=Count("id", filter=Q(status=LabelStatus.REJECTED)),
        )
        .order_by("reviewed_by__email")
    )
    done = by_status[LabelStatus.APPROVED]
    return {
        "total": total.value,
        "total_text": total.text,
        "statuses": statuses,
        "done": done.value,
        "done_text": done.text,
        "exact": total.exact and all(count.exact for count in by_status.values()),
        "labellers": list(labellers),
        "reviewers": list(reviewers),
    }
