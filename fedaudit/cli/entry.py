"""The console entry point, light on purpose: signals are handled before the heavy imports start.

* SIGTERM (what ``timeout``, systemd and CI runners send) is handled like Ctrl-C: it raises KeyboardInterrupt, so
  an attack stops, writes the best reconstruction so far and a partial report, and the command exits 130.
* Ctrl-C (or SIGTERM) while the CLI is still importing torch ends with one line on stderr and exit 130, not a
  traceback.
"""

from __future__ import annotations

import signal
import sys

EXIT_INTERRUPTED = 130  # fedaudit.errors.EXIT_INTERRUPTED, repeated to keep this module import-free


def _terminate(signum, frame) -> None:  # noqa: ARG001 - the signal handler's signature
    raise KeyboardInterrupt("terminated (SIGTERM)")


def main() -> None:
    signal.signal(signal.SIGTERM, _terminate)
    try:
        from fedaudit.cli.app import main as app_main
    except KeyboardInterrupt:
        sys.stderr.write("fedaudit: error: interrupted\n")
        sys.exit(EXIT_INTERRUPTED)
    app_main()
