"""The supervisor's checkpoint inspector (one worker process per attempt) imports torch and
Ultralytics as soon as it starts, before it is asked about a file, and answers each file with
that file's answer, also after a wait that was cut short: the database went away while it
waited (its keep-alive raised), the supervisor reconnected and asked about the next checkpoint.
Before, the late answer to the first file was taken for the second's (CI: "best-4.pt could not
be inspected (FileNotFoundError: … 'best-3.pt')", and a healthy run failed)."""

from pathlib import Path

import pytest

from tests.training.helpers import wait_for
from training.weights_process import CheckpointInspector


class DatabaseGone(Exception):
    pass


def _cut_short():
    raise DatabaseGone("terminating connection due to administrator command")


def test_an_answer_to_a_cut_short_wait_is_never_taken_for_the_next_files(tmp_path):
    first = tmp_path / "first.pt"
    first.write_bytes(b"not a checkpoint at all")
    second = tmp_path / "second.pt"
    second.write_bytes(b"PK\x03\x04 a zip that ends here")

    alone = CheckpointInspector()
    try:
        expected = alone.inspect(second, "best-4.pt")
    finally:
        alone.close()
    assert expected.error and "best-4.pt" in expected.error

    inspector = CheckpointInspector()
    try:
        # The worker is still importing torch when the wait is cut short: its answer to the
        # first file comes later, after the supervisor has deleted the file and moved on.
        with pytest.raises(DatabaseGone):
            inspector.inspect(first, "best-3.pt", keep_alive=_cut_short, every=0.01)
        first.unlink()
        answer = inspector.inspect(second, "best-4.pt")
        assert answer.error == expected.error
        assert "best-3.pt" not in answer.error
        # And the one after that is answered too (nothing is left queued behind).
        again = inspector.inspect(second, "best-5.pt")
        assert again.error == expected.error.replace("best-4.pt", "best-5.pt")
    finally:
        inspector.close()


def _loaded(pid: int, *libraries: str) -> bool:
    maps = Path(f"/proc/{pid}/maps").read_text()
    return all(library in maps for library in libraries)


def test_the_inspector_imports_torch_and_ultralytics_before_its_first_checkpoint():
    """The supervisor starts its inspector as the trainer starts. Before, the inspector imported
    torch at the first checkpoint it was asked about, which was stored seconds (20 s and more
    on a loaded machine) after the trainer sent it."""
    inspector = CheckpointInspector()
    try:
        inspector.start()
        pid = inspector.proc.pid
        # torch's own library and OpenCV's (Ultralytics imports it), with no file asked about.
        wait_for(lambda: _loaded(pid, "libtorch", "cv2"), timeout=120, what="the imports")
    finally:
        inspector.close()
