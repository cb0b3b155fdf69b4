"""A dataset's labelling progress: images per review status, and who labelled and reviewed how
many. Read by the dataset page and the labelling page."""

from django.db.models import Count, Q

from datasets.models import Dataset, Image, LabelStatus


def labelling_progress(*, dataset: Dataset) -> dict:
    """How many images are in each status, and who labelled and reviewed how many."""
    images = Image.objects.filter(dataset=dataset)
    by_status = dict(images.values_list("status").annotate(n=Count("id")).order_by())
    total = sum(by_status.values())
    statuses = [
        {
            "value": value,
            "label": label,
            "count": by_status.get(value, 0),
            "percent": round(100 * by_status.get(value, 0) / total) if total else 0,
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
    return {
        "total": total,
        "statuses": statuses,
        "done": by_status.get(LabelStatus.APPROVED, 0),
        "labellers": list(labellers),
        "reviewers": list(reviewers),
    }
