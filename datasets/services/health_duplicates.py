"""Byte-identical copies in one dataset: images of their own (each with its labels and split)
sharing one blob. The health check reports them, and reports train/val leakage when the copies
of one file sit on both sides (the model is then validated on a picture it trained on).

A pure function of the images' rows as datasets.services.health reads them: (id, filename,
split, label_count, blob id, ...).
"""

from collections import defaultdict

from datasets.models import Severity, Split
from datasets.services.health_checks import plural

EXACT_LEAKAGE = "exact_leakage"
EXACT_COPY = "exact_copy"
MAX_IMAGE_IDS = 1000  # per finding; the message says the total
_HELD_OUT = {Split.VAL, Split.TEST}


def _finding(kind: str, severity: str, message: str, ids: list[int]) -> dict:
    return {
        "kind": kind,
        "severity": severity,
        "message": message,
        "image_ids": ids[:MAX_IMAGE_IDS],
    }


def _names(groups: list[list[tuple]]) -> str:
    shown = "; ".join(" = ".join(row[1] for row in group[:3]) for group in groups[:3])
    return f" For example: {shown}." if shown else ""


def duplicate_findings(images: list[tuple]) -> list[dict]:
    """Files in the dataset more than once: an error where the copies cross train and
    val/test, a warning where they stay in one split."""
    by_blob: dict[int, list[tuple]] = defaultdict(list)
    for row in images:
        by_blob[row[4]].append(row)
    leaked, copies = [], []
    for group in by_blob.values():
        if len(group) < 2:
            continue
        splits = {row[2] for row in group}
        (leaked if Split.TRAIN in splits and splits & _HELD_OUT else copies).append(group)
    findings = []
    for groups, kind, severity, text in (
        (
            leaked,
            EXACT_LEAKAGE,
            Severity.ERROR,
            "Leakage: {files} are in train and in val/test as byte-identical copies "
            "({images}), so validation scores will look better than the model is.",
        ),
        (
            copies,
            EXACT_COPY,
            Severity.WARNING,
            "Copies: {files} are in the dataset more than once as byte-identical images "
            "({images}, each with its own labels; the bytes are stored once).",
        ),
    ):
        if not groups:
            continue
        ids = sorted(row[0] for group in groups for row in group)
        message = text.format(files=plural(len(groups), "file"), images=plural(len(ids), "image"))
        message += _names(groups)
        if len(message) > 500:
            message = message[:499] + "…"
        findings.append(_finding(kind, severity, message, ids))
    return findings
