"""The exceptions the CLI maps to exit codes.

Exit codes (ruff/bandit model): 0 ok, 1 leakage at or above ``--fail-on``, 2 bad input or usage,
3 runtime failure, 130 interrupted. Library code raises these; only the CLI turns them into
one stderr line and an exit code.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_LEAKAGE = 1
EXIT_INPUT = 2
EXIT_RUNTIME = 3
EXIT_INTERRUPTED = 130


class FedauditError(Exception):
    """Base class: a message meant for the user, and the exit code that goes with it."""

    exit_code = EXIT_RUNTIME


class InputError(FedauditError):
    """Malformed or inconsistent input (file, metadata, option): exit 2."""

    exit_code = EXIT_INPUT


class NotApplicable(InputError):
    """A method cannot run on this update; the message says why (exit 2, never a guess)."""

    def __init__(self, why: str):
        super().__init__(f"not applicable: {why}")
        self.why = why


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C during a training loop, carrying the model trained so far and its record, so it can still be saved."""

    def __init__(self, model, info: dict):
        super().__init__()
        self.model, self.info = model, info


class RuntimeFailure(FedauditError):
    """The inputs were fine but the computation failed (divergence, out of memory): exit 3."""

    exit_code = EXIT_RUNTIME
