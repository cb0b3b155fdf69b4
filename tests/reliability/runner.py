"""`make run` as the reliability tests drive it: scripts/run.sh under supervisord, in a folder of
the test's own, and what its processes are doing."""

import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import redis
from supervisor.childutils import getRPCInterface

from tests.servers import ROOT, free_port
from tests.training.helpers import wait_for

# What each Celery program writes in its log once it is consuming (or scheduling).
READY = {
    "worker": "celery@{host} ready.",
    "training": "training@{host} ready.",
    "beat": "beat: Starting...",
}
NOT_INHERITED = {"CACHE_URL", "CELERY_RESULT_BACKEND", "TRAINING_REDIS_URL", "INFERENCE_URL"}
PROGRAMS = ["web", "worker", "training", "inference", "beat"]
SUPERVISORCTL = [
    str(Path(sys.executable).parent / "supervisorctl"),
    "-c",
    "scripts/supervisord.conf",
]


class Runner:
    """One `make run`: scripts/run.sh started as from a terminal (a session of its own, so
    killpg(SIGINT) is the Ctrl-C a terminal sends), its output kept in a file."""

    def __init__(self, var_dir: Path, *, redis_url: str, database_url: str, name: str):
        self.var_dir = var_dir
        self.port = free_port()
        self.inference_port = free_port()
        self.redis_url = redis_url
        self.output_path = var_dir.parent / f"{name}.out"
        # The suite's Redis and model-server settings are not the run's: it gets its own below.
        self.env = {key: value for key, value in os.environ.items() if key not in NOT_INHERITED}
        self.env.update(
            KESTREL_VAR_DIR=str(var_dir),
            HOST="127.0.0.1",
            PORT=str(self.port),
            INFERENCE_PORT=str(self.inference_port),
            REDIS_URL=f"{redis_url}/0",
            CELERY_BROKER_URL=f"{redis_url}/1",
            DATABASE_URL=database_url,
            DJANGO_SETTINGS_MODULE="config.test_settings",
            KESTREL_SEED_DEMO="0",
            # As this machine's environment sets it: each program is to keep its bytecode.
            PYTHONDONTWRITEBYTECODE="1",
        )
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        with self.output_path.open("ab") as out:
            self.proc = subprocess.Popen(
                ["bash", "scripts/run.sh"],
                cwd=ROOT,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

        def up() -> bool:
            assert self.proc.poll() is None, f"run.sh ended early:\n{self.output()}"
            return "Kestrel is running at" in self.output()

        wait_for(up, timeout=180, what="make run to say Kestrel is running")

    def output(self) -> str:
        return self.output_path.read_text(errors="replace")

    def log(self, name: str) -> str:
        return (self.var_dir / "log" / f"{name}.log").read_text(errors="replace")

    def rpc(self):
        return getRPCInterface({"SUPERVISOR_SERVER_URL": f"unix://{self.var_dir}/supervisor.sock"})

    def status(self) -> dict[str, tuple[str, int]]:
        """Program -> (state, pid), as supervisord reports them."""
        return {
            info["name"]: (info["statename"], info["pid"])
            for info in self.rpc().supervisor.getAllProcessInfo()
        }

    def running(self, name: str) -> bool:
        return self.status()[name][0] == "RUNNING"

    def restarted(self, name: str, old_pid: int) -> int:
        """The new pid of program `name`, once supervisord has started it again."""
        state, pid = self.status()[name]
        return pid if state in {"STARTING", "RUNNING"} and pid not in {0, old_pid} else 0

    def serving(self, name: str) -> bool:
        """Whether program `name` does its job: the web answers a page, Redis a PING, the model
        server a connection on its port; a Celery program has said it is ready."""
        if name == "web":
            return self.web_answers()
        if name == "redis":
            try:
                return redis.Redis.from_url(self.redis_url, socket_timeout=2).ping()
            except redis.RedisError:
                return False
        if name == "inference":
            try:
                with socket.create_connection(("127.0.0.1", self.inference_port), timeout=2):
                    return True
            except OSError:
                return False
        return self.readiness(name) > 0

    def readiness(self, name: str) -> int:
        """How many times Celery program `name` said, in its log, that it was ready."""
        return self.log(name).count(READY[name].format(host=socket.gethostname()))

    def web_answers(self) -> bool:
        try:
            url = f"http://127.0.0.1:{self.port}/accounts/login/"
            return urllib.request.urlopen(url, timeout=5).status == 200  # noqa: S310
        except OSError:
            return False

    def processes(self) -> list[psutil.Process]:
        """run.sh, supervisord and every process under it."""
        shell = psutil.Process(self.proc.pid)
        return [shell, *shell.children(recursive=True)]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


def alive(processes: list[psutil.Process]) -> list[psutil.Process]:
    """Those still running (a zombie nobody has reaped yet counts as gone)."""
    left = []
    for proc in processes:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                left.append(proc)
        except psutil.NoSuchProcess:
            pass
    return left


def repo_var_state() -> dict[str, float]:
    """What a run writes in the checkout's var/ when KESTREL_VAR_DIR is not honoured."""
    var = ROOT / "var"
    paths = [var / name for name in ("supervisor.sock", "supervisord.pid", "kestrel.sqlite3")]
    paths += list((var / "log").glob("*.log")) + list(var.glob("celerybeat-schedule*"))
    return {str(path): path.stat().st_mtime for path in paths if path.exists()}
