"""`make run` keeps its processes alive: the real scripts/run.sh, under supervisord, in a folder
of the test's own (KESTREL_VAR_DIR), on the test's database. Each fault is the real one: a
process killed with SIGKILL, a port taken by another program, a second `make run`, Ctrl-C,
supervisord itself killed. Before, run.sh's `wait -n` stopped everything as soon as any one
process died, and each run truncated the logs.

Two runs share the folder, one after the other: the first with no Redis on its port (so
supervisord starts redis-server too) and the model server's port taken, the second on a Redis
of the test's own."""

import os
import signal
import socket
import stat
import subprocess
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import psutil
import pytest

from tests.reliability.conftest import RedisServer
from tests.reliability.runner import PROGRAMS, READY, SUPERVISORCTL, Runner, alive, repo_var_state
from tests.servers import ROOT, free_port, subprocess_database_url
from tests.training.helpers import wait_for

# The runs' processes use the test database (made once for the session, which this mark asks
# for); the tests themselves read nothing from it, and a transactional mark would empty it
# after each test under the running processes' feet, for nothing.
pytestmark = [
    pytest.mark.django_db,
    pytest.mark.same_on_any_database(
        "the quick start's runner (`make run`) runs on SQLite", on="sqlite"
    ),
]


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("quickstart") / "var"


@pytest.fixture(scope="module")
def database_url(django_db_setup, django_db_blocker) -> str:
    with django_db_blocker.unblock():
        return subprocess_database_url()


@pytest.fixture(scope="module")
def first_run(run_folder, database_url):
    """`make run` where no Redis answers at REDIS_URL (supervisord runs redis-server too) and
    the model server's port is already taken by another program (a socket the test holds)."""
    before = repo_var_state()
    runner = Runner(
        run_folder,
        redis_url=f"redis://127.0.0.1:{free_port()}",
        database_url=database_url,
        name="first-run",
    )
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", runner.inference_port))
    squatter.listen()
    try:
        runner.start()
        runner.repo_var_before = before
        # A page that does not exist: its "Not Found" line in web.log is how the second run
        # recognises this run's lines.
        runner.marker = f"/no-such-page-{uuid.uuid4().hex}/"
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(f"http://127.0.0.1:{runner.port}{runner.marker}", timeout=5)  # noqa: S310
        wait_for(lambda: runner.marker in runner.log("web"), timeout=10, what="the 404 logged")
        yield runner
    finally:
        runner.stop()
        squatter.close()


@pytest.fixture(scope="module")
def second_run(first_run, run_folder, database_url):
    """`make run` again in the same folder, after the first one stopped, with Redis already
    running (a Redis of the test's own) and every port free."""
    first_run.stop()
    redis_server = RedisServer()
    redis_server.start()
    runner = Runner(
        run_folder,
        redis_url=redis_server.url.rsplit("/", 1)[0],
        database_url=database_url,
        name="second-run",
    )
    runner.logs_before = {name: first_run.log(name) for name in ("supervisord", "web")}
    runner.marker = first_run.marker
    try:
        runner.start()
        yield runner
    finally:
        runner.stop()
        redis_server.kill()


def kill_and_see_it_started_again(runner: Runner, name: str, *, besides: set[str]) -> None:
    """SIGKILL program `name`; supervisord must start it again (a new pid that does its job
    again), log both, and leave the others (but those in `besides`) with the pids they had.
    The processes the killed one had started (a Celery pool) must be gone too."""
    wait_for(lambda: runner.serving(name), timeout=90, what=f"{name} up")
    before = runner.status()
    old_pid = before[name][1]
    children = psutil.Process(old_pid).children(recursive=True)
    readiness = runner.readiness(name) if name in READY else 0

    os.kill(old_pid, signal.SIGKILL)

    new_pid = wait_for(lambda: runner.restarted(name, old_pid), timeout=60, what=f"{name} again")
    if name in READY:
        wait_for(lambda: runner.readiness(name) > readiness, timeout=90, what=f"{name} ready")
    else:
        wait_for(lambda: runner.serving(name), timeout=90, what=f"{name} serving again")
    log = runner.log("supervisord")
    assert f"exited: {name} (terminated by SIGKILL; not expected)" in log
    assert f"spawned: '{name}' with pid {new_pid}" in log
    assert runner.status()[name][1] == new_pid  # not dying again at start
    after = runner.status()
    for other, (_, pid) in before.items():
        if other not in {name, *besides}:
            assert after[other][1] == pid, other
    wait_for(lambda: alive(children) == [], timeout=30, what=f"{name}'s children gone")
    assert runner.web_answers()


def test_every_program_keeps_the_bytecode_it_compiles(first_run):
    """`make run` from a shell that sets PYTHONDONTWRITEBYTECODE (this machine's does). Before,
    every program had it, and so did each trainer, model server and checkpoint inspector they
    started: each compiled torch, Django and Ultralytics from source again (a trainer 4-5 s
    more before its first batch)."""
    wait_for(lambda: all(first_run.serving(name) for name in PROGRAMS), timeout=90, what="up")
    shell, *started = first_run.processes()
    assert shell.environ().get("PYTHONDONTWRITEBYTECODE") == "1"  # the test's premise
    pythons = [p for p in alive(started) if "python" in Path(p.exe()).name]
    assert len(pythons) >= len(PROGRAMS)
    for process in pythons:
        assert "PYTHONDONTWRITEBYTECODE" not in process.environ(), process.cmdline()


@pytest.mark.parametrize("name", ["web", "worker", "training", "beat", "redis"])
def test_killed_program_is_started_again(first_run, name):
    """Fault: one of make run's processes dies (SIGKILL: the OOM killer, a crash). Before, the
    whole of Kestrel stopped with it and a running training job sat "running" until someone
    started it again. Now supervisord starts that one again (a new pid), says so in its log,
    and leaves every other process alone; the web answers. (The model server, failing on its
    taken port in this run, comes and goes by itself meanwhile: see the next test.)"""
    assert first_run.status()["redis"][0] == "RUNNING"  # none answered: the runner's own

    kill_and_see_it_started_again(first_run, name, besides={"inference"})


def test_program_dying_at_start_is_given_up(first_run):
    """Fault: a program that cannot start (the model server's port is taken by another program)
    restarted forever, or taking everything down with it. supervisord retries it with a
    growing back-off, then gives up (FATAL) and says so in supervisord.log and in the terminal;
    the other programs keep running and the web answers."""
    wait_for(
        lambda: first_run.status()["inference"][0] == "FATAL",
        timeout=150,
        what="inference given up",
    )
    gave_up = "gave up: inference entered FATAL state, too many start retries too quickly"
    log = first_run.log("supervisord")
    assert gave_up in log
    assert log.count("spawned: 'inference'") > 1  # retried before giving up
    assert gave_up in first_run.output()
    others = ("web", "worker", "training", "beat", "redis")
    wait_for(lambda: all(first_run.running(name) for name in others), timeout=60, what="others")
    assert first_run.status()["inference"][0] == "FATAL"  # given up on: not tried again
    assert first_run.web_answers()


def test_supervisorctl_reaches_the_runner_on_a_private_socket(first_run):
    """Fault: a control socket anyone on the machine could open (or a TCP port) would let them
    stop or start Kestrel's programs. supervisorctl reaches this run's supervisord through a
    unix socket in the run's folder that only its owner may open; it lists every program."""
    sock = first_run.var_dir / "supervisor.sock"
    mode = sock.stat().st_mode
    assert stat.S_ISSOCK(mode)
    assert stat.S_IMODE(mode) == 0o700
    result = subprocess.run(  # noqa: S603 - our venv's supervisorctl, fixed arguments
        [*SUPERVISORCTL, "status"],
        cwd=ROOT,
        env={**os.environ, "KESTREL_VAR_DIR": str(first_run.var_dir)},
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    for name in PROGRAMS:
        assert f"kestrel:{name}" in result.stdout, result.stdout + result.stderr
    assert "redis" in result.stdout


def test_second_make_run_leaves_the_running_one_alone(first_run):
    """Fault: `make run` typed again in another terminal while Kestrel runs. The second one
    must not take over or stop anything (its clean-up would otherwise halt the first run's
    processes): supervisord refuses the socket in use, and run.sh ends, saying so."""
    before = first_run.status()

    second = subprocess.run(  # noqa: S603 - bash and our script
        ["bash", "scripts/run.sh"],
        cwd=ROOT,
        env=first_run.env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        start_new_session=True,
        check=False,
    )

    assert second.returncode != 0
    assert "is Kestrel already running?" in second.stderr, second.stdout + second.stderr
    after = first_run.status()
    for name in ("web", "worker", "training", "beat", "redis"):
        assert after[name] == before[name], name
    assert first_run.web_answers()


def test_ctrl_c_stops_every_process(first_run):
    """Fault: Ctrl-C in the terminal running make run (SIGINT to its process group) leaving a
    process behind, holding its port or a training job, so the next make run fails. Every
    process it started, and their children, is gone within 30 s; run.sh exits 0; and nothing
    was written in the checkout's var/ (the run kept to KESTREL_VAR_DIR)."""
    up = ("web", "worker", "training", "beat", "redis")
    wait_for(lambda: all(first_run.status()[name][1] for name in up), timeout=60, what="all up")
    processes = first_run.processes()
    assert len(processes) >= 2 + len(up)  # run.sh, supervisord, the programs (and children)

    os.killpg(first_run.proc.pid, signal.SIGINT)
    rc = first_run.proc.wait(timeout=30)  # a run that does not stop in 30 s fails here

    assert rc == 0, first_run.output()
    assert alive(processes) == []
    assert "Stopped." in first_run.output()
    assert repo_var_state() == first_run.repo_var_before


def test_second_run_appends_to_the_logs(second_run):
    """Fault: each make run truncated var/log/*.log, so the lines that explained why the last
    run went wrong were gone as soon as it was started again. The second run's supervisord
    and web lines come after the first run's, which are still there."""
    supervisord_log = second_run.log("supervisord")
    first = second_run.logs_before["supervisord"]
    assert first and supervisord_log.startswith(first)
    pid = second_run.rpc().supervisor.getPID()
    assert f"supervisord started with pid {pid}" in supervisord_log[len(first) :]
    web_log = second_run.log("web")
    assert web_log.startswith(second_run.logs_before["web"])
    assert second_run.marker in web_log
    assert second_run.status()["redis"][0] == "STOPPED"  # Redis answered: not started


def test_killed_model_server_is_started_again(second_run):
    """Fault: the model server dies (SIGKILL), as the other programs do in the first run: it
    is started again (a new pid, listening on its port again), and the others keep their
    pids."""
    kill_and_see_it_started_again(second_run, "inference", besides=set())


def test_supervisord_killed_ends_the_run(second_run):
    """Fault: supervisord itself killed (SIGKILL): its programs would run on without anyone
    restarting them, holding their ports. run.sh says so, stops what supervisord had started,
    and ends."""
    processes = second_run.processes()
    supervisord = second_run.rpc().supervisor.getPID()

    os.kill(supervisord, signal.SIGKILL)
    rc = second_run.proc.wait(timeout=60)

    assert rc != 0
    assert "supervisord exited" in second_run.output()
    assert alive(processes) == []
