"""The environment Ultralytics runs in: its own config folder with fonts, no network when
downloads are off, checkpoints only through torch's restricted unpickler. Used by the trainer
process, Kestrel's other processes that run Ultralytics, and the benches; never imports
Ultralytics."""

import os
import shutil
from pathlib import Path

from training.weights_check import RESTRICTED_LOADING_ENV

FONT_NAMES = ("Arial.ttf", "Arial.Unicode.ttf")


def _any_ttf() -> Path | None:
    import matplotlib  # installed with Ultralytics; ships DejaVu fonts

    found = sorted(Path(matplotlib.get_data_path()).glob("fonts/ttf/DejaVuSans.ttf"))
    return found[0] if found else None


def fonts_install(config_dir: Path) -> None:
    """Put the fonts Ultralytics would download for its plots into its config folder."""
    target = Path(config_dir) / "Ultralytics"
    target.mkdir(parents=True, exist_ok=True)
    missing = [name for name in FONT_NAMES if not (target / name).exists()]
    if not missing:
        return
    source = _any_ttf()
    if source is None:
        return
    for name in missing:
        shutil.copyfile(source, target / name)


def ultralytics_env(config_dir: Path, *, offline: bool) -> dict[str, str]:
    """Environment variables for a process that runs Ultralytics. Checkpoints open only through
    torch's restricted unpickler there: the process calls
    training.weights_check.checkpoint_loading_restrict() for the classes it allows, and one
    that does not can open none."""
    fonts_install(config_dir)
    env = {"YOLO_CONFIG_DIR": str(config_dir), "YOLO_VERBOSE": "True", **RESTRICTED_LOADING_ENV}
    if offline:
        env.update(YOLO_OFFLINE="1", YOLO_AUTOINSTALL="0")
    return env


def ultralytics_process_env() -> dict[str, str]:
    """The environment of Kestrel's own processes that run Ultralytics (model server, assist,
    the export and inspection worker): offline, settings in Kestrel's training folder unless
    YOLO_CONFIG_DIR says otherwise."""
    from django.conf import settings

    config_dir = (
        os.environ.get("YOLO_CONFIG_DIR") or Path(settings.TRAINING_DIR) / "ultralytics-config"
    )
    return ultralytics_env(Path(config_dir), offline=True)
