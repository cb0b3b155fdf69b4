"""A checkout's .env sets every variable as the environment would, for each reader: the settings
(KESTREL_VAR_DIR included, which they read first) and `make run`'s script (HOST, PORT,
REDIS_URL, ...: it used to take only the environment's, so a .env's PORT or REDIS_URL was
silently ignored). What the environment says always wins."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOT_ENV = """\
# a comment
PORT=9123
HOST=localhost
REDIS_URL=redis://127.0.0.1:6379/5
KESTREL_VAR_DIR={var}
QUOTED="two words and a 'quote' and $dollar"
SET_ALREADY=from-the-file
"""


def _run(args: list[str], tmp_path: Path, **env: str) -> str:
    """`args` run in the checkout with a bare environment (and `env`); what it printed."""
    return subprocess.run(
        args,
        cwd=ROOT,
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout


def test_the_shell_gets_the_file_s_variables_quoted_and_the_environment_wins(tmp_path):
    dot_env = tmp_path / ".env"
    dot_env.write_text(DOT_ENV.format(var=tmp_path / "elsewhere"))
    script = (
        f'eval "$({sys.executable} -m config.env_file {dot_env})"; '
        'printf "%s|" "$PORT" "$HOST" "$REDIS_URL" "$QUOTED" "$SET_ALREADY" "$KESTREL_VAR_DIR"'
    )
    out = _run(["bash", "-euc", script], tmp_path, SET_ALREADY="from-the-environment")
    assert out.split("|")[:-1] == [
        "9123",
        "localhost",
        "redis://127.0.0.1:6379/5",
        "two words and a 'quote' and $dollar",
        "from-the-environment",
        str(tmp_path / "elsewhere"),
    ]


def test_no_file_no_lines(tmp_path):
    out = _run([sys.executable, "-m", "config.env_file", str(tmp_path / "absent")], tmp_path)
    assert out == ""


def test_make_run_reads_its_own_variables_from_the_file():
    script = (ROOT / "scripts" / "run.sh").read_text()
    read = script.index("-m config.env_file")
    assert read < script.index("PORT=${PORT:-8000}") and read < script.index("KESTREL_VAR_DIR=")


def test_the_settings_take_the_var_folder_from_the_file(tmp_path):
    dot_env = tmp_path / ".env"
    dot_env.write_text(DOT_ENV.format(var=tmp_path / "elsewhere"))
    code = (
        "import sys; from pathlib import Path; import config.env_file as f; "
        f"f.DEFAULT = Path({str(dot_env)!r}); "
        "from django.conf import settings; import django; django.setup(); "
        "print(settings.VAR_DIR); print(settings.CACHES['default']['LOCATION'])"
    )
    out = _run([sys.executable, "-c", code], tmp_path, DJANGO_SETTINGS_MODULE="config.settings")
    var_dir, cache = out.split()[-2:]
    assert var_dir == str(tmp_path / "elsewhere")
    assert cache.startswith("redis://127.0.0.1:6379/5")
