"""The environment a stock `ultralytics` client runs in for the tests that start it in a
subprocess against the live test server: a person's machine, as far as the client can tell."""

import json
import os
import shutil
from pathlib import Path

# The client turns itself off under pytest or CI; the rest are left set by other tests in the
# same worker (under the first two stock ultralytics cannot load its own best.pt; the third
# silences it).
_DROPPED = {
    "PYTEST_CURRENT_TEST",
    "PYTEST_XDIST_WORKER",
    "CI",
    "GITHUB_ACTIONS",
    "GITHUB_WORKFLOW",
    "RUNNER_OS",
    "TORCH_FORCE_WEIGHTS_ONLY_LOAD",
    "YOLO_VERBOSE",
}


def client_env(config_dir: Path, **variables: str) -> dict[str, str]:
    """Not under pytest or CI, offline for anything but Kestrel (no downloads, no installs, no
    GPU), Ultralytics' settings in `config_dir` with the fonts it would download laid in;
    then `variables` (ULTRALYTICS_PLATFORM_URL, ULTRALYTICS_API_KEY, ...).

    Its runs, weights and datasets in `config_dir` too: by default the client puts them beside
    the git checkout it is installed in (this repository), and a run name already taken in
    runs/ would be sent incremented (trainer.args.name is the folder's name)."""
    env = {
        k: v for k, v in os.environ.items() if k not in _DROPPED and not k.startswith("ULTRALYTICS")
    }
    fonts = config_dir / "Ultralytics"
    fonts.mkdir(parents=True, exist_ok=True)
    import matplotlib

    dejavu = Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "DejaVuSans.ttf"
    for name in ("Arial.ttf", "Arial.Unicode.ttf"):
        shutil.copyfile(dejavu, fonts / name)
    folders = {f"{what}_dir": str(config_dir / what) for what in ("runs", "weights", "datasets")}
    (fonts / "settings.json").write_text(json.dumps({**folders, "sync": False}))
    env.update(
        YOLO_OFFLINE="1",
        YOLO_AUTOINSTALL="0",
        YOLO_CONFIG_DIR=str(config_dir),
        CUDA_VISIBLE_DEVICES="",
    )
    env.update(variables)
    return env
