"""The suite cannot hang: a test past its time limit fails with every thread's stack and the suite goes on; a test
stuck where Python cannot stop it ends the suite with every stack soon after its limit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PLUGINS = Path(__file__).parent / "plugins"

PROBES = """
import signal
import threading
import time


def test_sleeps_past_its_limit():
    threading.Thread(target=time.sleep, args=(30,), name="a helper thread", daemon=True).start()
    time.sleep(30)


def test_after_it_still_runs():
    pass


def test_stuck_where_python_cannot_stop_it():
    # The time limit's alarm never reaches Python here, as in a native wait that never returns to the interpreter.
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])
    time.sleep(60)


def test_never_reached():
    pass
"""


def _pytest(folder: Path, selected: str) -> tuple[int, str]:
    """pytest with this suite's time limit on the probes ``selected`` picks: a limit of 1 s, a hard stop 2 s later."""
    (folder / "test_probes.py").write_text(PROBES)
    command = [sys.executable, "-m", "pytest", "-p", "time_limit", "-p", "no:cacheprovider", "-v", "-k", selected]
    options = ["-o", "timeout=1", "-o", "hard_stop_grace=2", "-c", os.devnull, "--rootdir", str(folder)]
    finished = subprocess.run(
        [*command, *options, "test_probes.py"],
        cwd=folder,
        env={**os.environ, "PYTHONPATH": str(PLUGINS)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    return finished.returncode, finished.stdout + finished.stderr


def test_a_test_past_its_limit_fails_with_every_threads_stack_and_the_suite_goes_on(tmp_path):
    code, out = _pytest(tmp_path, "sleeps_past_its_limit or after_it_still_runs")
    assert code == 1
    assert "test_sleeps_past_its_limit FAILED" in out and "Timeout (>1.0s) from pytest-timeout" in out
    assert "Stack of a helper thread" in out, "the failure shows every thread's stack"
    assert "test_after_it_still_runs PASSED" in out


def test_a_test_stuck_where_python_cannot_stop_it_ends_the_suite_with_every_stack(tmp_path):
    code, out = _pytest(tmp_path, "stuck or never_reached")
    assert code != 0
    # faulthandler's words: every thread's stack, the stuck test's line in the main thread's, and nothing after.
    assert "Timeout (0:00:03)!" in out and "in test_stuck_where_python_cannot_stop_it" in out
    assert "test_never_reached" not in out
