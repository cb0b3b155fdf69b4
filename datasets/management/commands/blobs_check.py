from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from datasets.models import Image
from datasets.services.stored_blobs import (
    blobs_damage_mark,
    blobs_damaged,
    blobs_repair,
    stale_temp_files,
)


class Command(BaseCommand):
    help = (
        "Check every stored image file against the size (and, with --hash, the SHA-256) its row "
        "records: report the ones missing or damaged. With --repair, store again those a good "
        "copy is found of (a stored training archive, or --from), mark the rest on the health "
        "page of each dataset that uses them, and remove files a killed write left. Exits with "
        "status 1 while any stays damaged."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--hash",
            dest="hash_check",
            action="store_true",
            help="read and hash every file (slower: all bytes)",
        )
        parser.add_argument("--repair", action="store_true")
        parser.add_argument(
            "--from",
            dest="sources",
            type=Path,
            action="append",
            default=[],
            metavar="PATH",
            help="a folder or zip holding original images to repair from (repeatable)",
        )

    def handle(self, *args, hash_check: bool, repair: bool, sources: list[Path], **options):
        for source in sources:
            if not source.exists():
                raise CommandError(f"{source} does not exist.")
        checked, damaged = blobs_damaged(hash_check=hash_check)
        what = "sizes and SHA-256" if hash_check else "sizes; --hash reads and hashes them too"
        self.stdout.write(f"Checked {checked:,} stored image files ({what}).")
        uses = _uses([d.blob_id for d in damaged])
        for d in damaged:
            self.stdout.write(f"  {d.key}: {d.problem}; {uses.get(d.blob_id, 'used by no image')}")
        stale = stale_temp_files()
        if stale:
            verb = "removed" if repair else "left"
            self.stdout.write(f"{len(stale):,} files a killed write left behind ({verb}):")
            for path in stale:
                self.stdout.write(f"  {path}")
                if repair:
                    path.unlink(missing_ok=True)
        if not damaged:
            self.stdout.write("Every stored image file is whole.")
            if repair:
                blobs_damage_mark(damaged=[])  # clears marks a repair made unneeded
            return
        if not repair:
            raise CommandError(
                f"{len(damaged):,} stored image files are damaged or missing. Run again with "
                "--repair (and --from a folder of the original images, where there is one)."
            )
        repaired = blobs_repair(damaged=damaged, sources=sources)
        for d in damaged:
            if d.blob_id in repaired:
                self.stdout.write(f"  {d.key}: stored again from {repaired[d.blob_id]}")
        left = [d for d in damaged if d.blob_id not in repaired]
        datasets = blobs_damage_mark(damaged=left)
        self.stdout.write(f"Repaired {len(repaired):,} of {len(damaged):,}.")
        if left:
            raise CommandError(
                f"{len(left):,} stored image files could not be repaired: no good copy was "
                f"found. They are marked on the health page of {len(datasets):,} "
                f"dataset{'s' * (len(datasets) != 1)} (ids {', '.join(map(str, datasets))}); "
                "importing the original images again, into any dataset, repairs them."
            )


def _uses(blob_ids: list[int]) -> dict[int, str]:
    """blob id → which images use it, in words (the first few by dataset and name)."""
    names: dict[int, list[str]] = {}
    for start in range(0, len(blob_ids), 2000):
        rows = (
            Image.objects.filter(blob_id__in=blob_ids[start : start + 2000])
            .order_by("blob_id", "dataset_id", "pk")
            .values_list("blob_id", "dataset_id", "filename")
        )
        for blob_id, dataset_id, filename in rows:
            names.setdefault(blob_id, []).append(f"dataset {dataset_id} “{filename}”")
    return {
        blob_id: ", ".join(found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
        for blob_id, found in names.items()
    }
