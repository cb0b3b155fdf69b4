"""The data checks of a dataset version: what training refuses (errors) and what it trains only
when told to (warnings, “Train anyway”).

The rules are the health check's own (datasets.services.health_checks.data_findings), run on the
version's manifest, plus the files the dataset's last health check could not decode. The
training form, the job submit service, the API and the health page all call `version_check`, so
they say the same sentences about the same version.
"""

from dataclasses import dataclass

from django.utils import timezone

from core.errors import ServiceError
from datasets.models import PIXEL_TASKS, DatasetVersion, HealthFinding, Image, Severity, Split
from datasets.services.health_checks import (
    DataTally,
    Finding,
    Kind,
    data_findings,
    findings_sorted,
    pixel_version_findings,
    plural,
)
from datasets.services.versions import version_manifest_load


@dataclass(frozen=True)
class VersionCheck:
    version: DatasetVersion
    task: str
    findings: list[Finding]  # errors first
    train_images: int
    val_images: int

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.level == Severity.ERROR]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.level == Severity.WARNING]

    @property
    def name(self) -> str:
        return f"{self.version.dataset.name} v{self.version.number}"

    def finding(self, code: str) -> Finding | None:
        return next((f for f in self.findings if f.code == code), None)


def version_check(version: DatasetVersion, *, task: str | None = None) -> VersionCheck:
    """Every finding on `version` as `task` (the dataset's by default) would train it."""
    task = task or version.dataset.task
    manifest = version_manifest_load(version)
    if task in PIXEL_TASKS:
        return _pixel_version_check(version, task, manifest)
    tally = DataTally(task=task, classes=list(enumerate(manifest["classes"])))
    for i, image in enumerate(manifest["images"]):
        tally.image(i, image["split"])
        for label in image["labels"]:
            tally.label(i, label["class"], label["kind"])
    findings = data_findings(tally)
    broken = _broken(version, manifest)
    if broken:
        findings.append(broken)
    counts = tally.split_images()
    return VersionCheck(
        version=version,
        task=task,
        findings=findings_sorted(findings),
        train_images=counts[Split.TRAIN],
        val_images=counts[Split.VAL],
    )


def _pixel_version_check(version: DatasetVersion, task: str, manifest: dict) -> VersionCheck:
    """A semantic or depth version trains on its images that have a map (the manifest's
    "mask"), and only on those: the split rules count them. Which classes a mask holds is not
    in the manifest (it would mean decoding every mask), so the class rules are the health
    check's here."""
    tally = DataTally(task=task, classes=[])
    masked = 0
    for i, image in enumerate(manifest["images"]):
        if "mask" in image:
            masked += 1
            tally.image(i, image["split"])
            tally.label(i, None, "mask")
    findings = pixel_version_findings(task=task, images=len(manifest["images"]), masked=masked)
    findings += data_findings(tally)
    broken = _broken(version, manifest)
    if broken:
        findings.append(broken)
    counts = tally.split_images()
    return VersionCheck(
        version=version,
        task=task,
        findings=findings_sorted(findings),
        train_images=counts[Split.TRAIN],
        val_images=counts[Split.VAL],
    )


def _broken(version: DatasetVersion, manifest: dict) -> Finding | None:
    """The version's images whose bytes the dataset's last health check could not decode, or
    found damaged in storage (by content: a file that does not decode does not in any
    version). Images deleted from the dataset since are not known any more, nor those past a
    finding's first 1,000."""
    findings = list(
        HealthFinding.objects.filter(
            dataset_id=version.dataset_id, kind__in=(Kind.UNREADABLE, Kind.STORED_DAMAGED)
        ).only("image_ids", "created_at")
    )
    image_ids = [i for finding in findings for i in finding.image_ids]
    if not image_ids:
        return None
    finding = max(findings, key=lambda f: f.created_at)
    shas = set(
        Image.objects.filter(dataset_id=version.dataset_id, pk__in=image_ids).values_list(
            "blob__sha256", flat=True
        )
    )
    keys = tuple(i for i, image in enumerate(manifest["images"]) if image["sha256"] in shas)
    if not keys:
        return None
    when = timezone.localtime(finding.created_at).strftime("%Y-%m-%d %H:%M")
    return Finding(
        Severity.ERROR,
        Kind.UNREADABLE,
        f"{plural(len(keys), 'image')} cannot be decoded (missing, truncated or corrupt), as "
        f"the health check of {when} found; training cannot read "
        f"{'it' if len(keys) == 1 else 'them'}. Delete or upload them again, then save a new "
        "version.",
        keys,
    )


TRAIN_ANYWAY = "Train anyway"


def version_train_check(
    version: DatasetVersion, *, task: str, train_anyway: bool = False
) -> VersionCheck:
    """The check at submit: refused with the errors' sentences (whatever `train_anyway` says),
    or with the warnings' when `train_anyway` is not set."""
    check = version_check(version, task=task)
    if check.errors:
        raise ServiceError(
            f"{check.name} cannot be trained: " + " ".join(f.sentence for f in check.errors)
        )
    if check.warnings and not train_anyway:
        raise ServiceError(
            f"{check.name} has {plural(len(check.warnings), 'warning')}: "
            + " ".join(f.sentence for f in check.warnings)
            + f" Tick “{TRAIN_ANYWAY}” to train on it as it is."
        )
    return check
