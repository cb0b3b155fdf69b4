"""Stop every process whose environment holds NAME=VALUE: what a run started and then lost
track of (scripts/run.sh: supervisord's programs, tagged by its socket; bench/gpu.sh: its parts,
tagged by its folder). TERM, then KILL after 10 s; prints MESSAGE with the count, if any.

    python scripts/stop_tagged.py NAME VALUE MESSAGE
"""

import os
import sys

import psutil


def main() -> None:
    name, value, message = sys.argv[1:4]
    left = []
    for proc in psutil.process_iter():
        try:
            if proc.pid != os.getpid() and proc.environ().get(name) == value:
                left.append(proc)
        except psutil.Error:
            pass
    for proc in left:
        proc.terminate()
    _, alive = psutil.wait_procs(left, timeout=10)
    for proc in alive:
        proc.kill()
    if left:
        print(message.format(count=len(left)))


if __name__ == "__main__":
    main()
