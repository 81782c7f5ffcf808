"""`make run`'s way into `dagster dev`: the command it is given, run in this process with SIGINT's default handling.

A shell without job control (a script, a service manager, `make run &`) starts its background commands with SIGINT
ignored, and Python keeps a signal it inherits ignored. `dagster dev` handles SIGTERM with SIGINT's handler, so there
it ignored SIGTERM too, and stopping `make run` stopped nothing. With SIGINT's default restored before the exec,
Python installs its own handler, and a SIGTERM or Ctrl-C stops `dagster dev`, which stops everything it started.
Usage: ``python -m nakodo_dagster.interruptible PROGRAM [ARGUMENT...]``.
"""

from __future__ import annotations

import os
import signal
import sys


def exec_interruptible(command: list[str]) -> None:
    """Replace this process with ``command``, SIGINT handled as by default."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.execvp(command[0], command)


if __name__ == "__main__":
    exec_interruptible(sys.argv[1:])
