"""The checkout's `.env`, read once the same way for every reader: config/settings.py, and
`make run` (scripts/run.sh), whose own variables (HOST, PORT, REDIS_URL, INFERENCE_PORT,
KESTREL_VAR_DIR, ...) a `.env` sets as it sets the settings'. The environment always wins.

    python -m config.env_file [path]   # `export NAME=value` lines for the shell, quoted
"""

import os
import re
import shlex
import sys
from pathlib import Path

import environ

DEFAULT = Path(__file__).resolve().parent.parent / ".env"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def read(path: Path | None = None) -> dict[str, str]:
    """Put the file's variables (DEFAULT's unless told another) that the environment does not
    set into it, none when there is no file; those put there."""
    path = path or DEFAULT
    if not path.is_file():
        return {}
    before = set(os.environ)
    environ.Env.read_env(path, overwrite=False)
    return {name: value for name, value in os.environ.items() if name not in before}


def main(argv: list[str]) -> None:
    added = read(Path(argv[0]) if argv else None)
    for name, value in added.items():
        if _NAME.fullmatch(name):
            print(f"export {name}={shlex.quote(value)}")


if __name__ == "__main__":
    main(sys.argv[1:])
