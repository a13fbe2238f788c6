"""The console entry point, light on purpose: signals are handled before the heavy imports start.

* SIGTERM (what ``timeout``, systemd and CI runners send) is handled like Ctrl-C: it raises KeyboardInterrupt, so
  an attack stops, writes the best reconstruction so far and a partial report, and the command exits 130.
* Ctrl-C (or SIGTERM) while the CLI is still importing torch or building its commands ends with one line on stderr
  and exit 130, not a traceback. (A signal that lands before the interpreter has started kills it silently: no
  code of ours has run yet.) Once the command has finished, signals are ignored while the process exits, so a late
  Ctrl-C cannot turn a finished command's exit code into a kill by SIGINT.
"""

from __future__ import annotations

import signal
import sys

EXIT_INTERRUPTED = 130  # fedaudit.errors.EXIT_INTERRUPTED, repeated to keep this module import-free


def _terminate(signum, frame) -> None:  # noqa: ARG001 - the signal handler's signature
    raise KeyboardInterrupt("terminated (SIGTERM)")


def main() -> None:
    signal.signal(signal.SIGTERM, _terminate)
    code: int | str | None = 0
    try:
        from fedaudit.cli.app import main as app_main

        app_main()  # it handles an interrupt while a command runs; this one while the CLI is still being built
    except KeyboardInterrupt:
        sys.stderr.write("fedaudit: error: interrupted\n")
        code = EXIT_INTERRUPTED
    except SystemExit as done:
        code = done.code
    # the command is over and what it owed is written: a signal now must not turn its exit into a kill
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.exit(code)
