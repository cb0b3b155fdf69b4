"""The environment Ultralytics runs in: its own config folder with fonts, and no network when
downloads are off. Used by the trainer process and the benches; never imports Ultralytics."""

import shutil
from pathlib import Path

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
    """Environment variables for a process that runs Ultralytics."""
    fonts_install(config_dir)
    env = {"YOLO_CONFIG_DIR": str(config_dir), "YOLO_VERBOSE": "True"}
    if offline:
        env.update(YOLO_OFFLINE="1", YOLO_AUTOINSTALL="0")
    return env
