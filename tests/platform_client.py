"""The environment a stock `ultralytics` client runs in for the tests that start it in a
subprocess against the live test server: a person's machine, as far as the client can tell."""

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
    then `variables` (ULTRALYTICS_PLATFORM_URL, ULTRALYTICS_API_KEY, ...)."""
    env = {
        k: v for k, v in os.environ.items() if k not in _DROPPED and not k.startswith("ULTRALYTICS")
    }
    fonts = config_dir / "Ultralytics"
    fonts.mkdir(parents=True, exist_ok=True)
    import matplotlib

    dejavu = Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "DejaVuSans.ttf"
    for name in ("Arial.ttf", "Arial.Unicode.ttf"):
        shutil.copyfile(dejavu, fonts / name)
    env.update(
        YOLO_OFFLINE="1",
        YOLO_AUTOINSTALL="0",
        YOLO_CONFIG_DIR=str(config_dir),
        CUDA_VISIBLE_DEVICES="",
    )
    env.update(variables)
    return env
