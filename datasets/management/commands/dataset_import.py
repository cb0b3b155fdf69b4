import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from core.errors import ServiceError
from datasets.models import Dataset, ImportStatus, Task
from datasets.services.datasets import dataset_create
from datasets.services.import_report import classes_without_labels_line, format_title
from datasets.services.ingest import dataset_import_path
from datasets.services.video import video_fps_check
from workspaces.models import Membership, Role
from workspaces.selectors import workspace_access_for_user


class Command(BaseCommand):
    help = (
        "Import an archive or folder from this server's disk into a dataset (created if missing) "
        "and print the import report as JSON."
    )

    def add_arguments(self, parser):
        parser.add_argument("path", type=Path)
        parser.add_argument("--workspace", required=True, help="workspace slug")
        parser.add_argument("--name", required=True, help="dataset name")
        parser.add_argument("--task", choices=Task.values, default=Task.DETECT)
        parser.add_argument(
            "--depth-scale",
            default=None,
            help="depth datasets made by this command: the PNG value of one metre (default 1000; "
            "an Ultralytics data YAML's depth_scale is taken while the dataset has no depth map)",
        )
        parser.add_argument(
            "--video-fps",
            default=None,
            help="frames per second sampled from videos (default 1)",
        )

    def handle(
        self,
        *args,
        path: Path,
        workspace: str,
        name: str,
        task: str,
        video_fps=None,
        depth_scale=None,
        **options,
    ):
        try:
            video_fps = video_fps_check(video_fps)
        except ServiceError as exc:
            raise CommandError(str(exc)) from None
        owner = (
            Membership.objects.filter(workspace__slug=workspace, role=Role.OWNER)
            .select_related("user")
            .order_by("pk")
            .first()
        )
        if owner is None:
            raise CommandError(f"No workspace {workspace!r}.")
        access = workspace_access_for_user(user=owner.user, slug=workspace)
        dataset = Dataset.objects.for_workspace(access.workspace).filter(name__iexact=name).first()
        if dataset is None:
            try:
                dataset = dataset_create(
                    access=access, name=name, task=task, depth_scale=depth_scale
                )
            except ServiceError as exc:
                raise CommandError(str(exc)) from None
        imp = dataset_import_path(access=access, dataset=dataset, path=path, video_fps=video_fps)
        out = {
            "dataset": dataset.pk,
            "import": imp.pk,
            "status": imp.status,
            "error": imp.error,
            "report": imp.report,
        }
        self.stdout.write(json.dumps(out, indent=2, ensure_ascii=False))
        # What the import page leads with, for the person at the terminal (stdout stays JSON).
        report = imp.report if isinstance(imp.report, dict) else {}
        for line in report_lines(report):
            self.stderr.write(line)
        if imp.status != ImportStatus.SUCCEEDED:
            raise CommandError(imp.error or "The import failed.")
        if report.get("labels_found") and not report.get("labels_imported"):
            raise CommandError(report.get("warning") or "Labels were found but none imported.")


def report_lines(report: dict) -> list[str]:
    """What the import page shows, in its order: a warning, what was imported (with declared
    classes that got no label as one line), then what was truly not imported, by reason."""
    lines = []
    if report.get("warning"):
        lines.append(f"Warning: {report['warning']}")
    if "maps_imported" in report:  # a semantic or depth dataset: masks or depth maps
        what = "depth maps" if "depth_scale" in report else "masks"
        labels = f"{report['maps_imported']:,} {what}"
    else:
        labels = f"{report.get('labels_imported', 0):,} labels"
    fmt = format_title(report["format"]) if report.get("format") else "no format"
    lines.append(f"Imported {report.get('images_imported', 0):,} images and {labels} ({fmt}).")
    names = report.get("classes_without_labels") or []
    if line := classes_without_labels_line(names, report.get("classes_without_labels_count", 0)):
        lines.append(line)
    groups = report.get("not_imported") or []
    if groups:
        lines.append("Not imported:")
    for group in groups:
        lines.append(f"  {group['title']}: {group['count']:,}")
        for reason in group.get("reasons", []):
            lines.append(f"    {reason['count']:,} × {reason['reason']}")
    return lines
