"""An output folder that appears whole or not at all, and never costs the user a folder fedaudit did not write.

* Files are written into a staging folder beside the target (``.NAME.PID.XXXX.partial``); ``commit()`` renames it
  into place. A run that fails leaves the previous report untouched.
* An existing target is refused unless ``force``; even then it is replaced only when it holds the marker file
  (``MARKER``) that fedaudit writes into every output folder it creates. A folder of the user's is refused (exit 2)
  whatever the flags.
* A symbolic link as the target is followed: the folder it points to is written (and the link kept).
* One writer at a time: an exclusive lock (``flock`` on ``.NAME.lock`` beside the target) is held from the start to
  commit or abort; a second run writing the same output exits 2 at once. The lock dies with its process.
* Staging and replaced folders left by a killed run (their process is gone) are swept when the next run for the
  same target starts.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

from fedaudit import __version__
from fedaudit.errors import InputError
from fedaudit.io.files import atomic_write_bytes

MARKER = ".fedaudit-output"  # in every output folder fedaudit writes: --force replaces only folders holding it


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


class OutputDir:
    def __init__(self, target: str | Path, force: bool = False):
        given = Path(target)
        self.target = given.resolve() if given.is_symlink() else given
        if self.target.exists() or self.target.is_symlink():
            if not self.target.is_dir():
                raise InputError(f"output {str(given)!r} exists and is not a folder")
            if not force:
                raise InputError(f"output folder {str(given)!r} already exists; pass --force to replace it")
            if not (self.target / MARKER).is_file():
                raise InputError(f"output folder {str(given)!r} was not written by fedaudit (it has no {MARKER} "
                                 "file); refusing to replace it, even with --force: choose another output or remove it")
        parent = self.target.parent
        if not parent.is_dir():
            raise InputError(f"cannot write {str(given)!r}: folder {str(parent)!r} does not exist")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise InputError(f"cannot write {str(given)!r}: folder {str(parent)!r} is not writable")
        self.committed = False
        self._lock(given)
        self._sweep()
        try:
            self.staging = Path(tempfile.mkdtemp(prefix=f".{self.target.name}.{os.getpid()}.", suffix=".partial",
                                                 dir=parent))
        except OSError as exc:
            self._unlock()
            raise InputError(f"cannot write {str(given)!r}: {exc.strerror or exc}") from None
        self.write_text(MARKER, json.dumps({"tool": "fedaudit", "version": __version__}) + "\n")

    # --- one writer -------------------------------------------------------------------------------------------
    def _lock(self, given: Path) -> None:
        self.lock_path = self.target.with_name(f".{self.target.name}.lock")
        try:
            self._lock_fd: int | None = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise InputError(f"cannot write {str(given)!r}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._lock_fd)
            self._lock_fd = None
            raise InputError(f"output {str(given)!r} is being written by another fedaudit run; wait for it or "
                             "choose another output") from None
        os.ftruncate(self._lock_fd, 0)
        os.write(self._lock_fd, f"{os.getpid()}\n".encode())

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            self.lock_path.unlink(missing_ok=True)  # before the unlock: a waiting writer then makes a fresh file
            os.close(self._lock_fd)
            self._lock_fd = None

    def _sweep(self) -> None:
        """Remove staging and replaced folders of this target whose process is gone (a killed run's leftovers)."""
        pattern = re.compile(rf"^\.{re.escape(self.target.name)}\.(?:(\d+)\..*\.partial|old-(\d+))$")
        for p in self.target.parent.iterdir():
            m = pattern.match(p.name)
            if m and not _alive(int(m.group(1) or m.group(2))):
                shutil.rmtree(p, ignore_errors=True)

    # --- writing ----------------------------------------------------------------------------------------------
    def write_bytes(self, rel: str, data: bytes) -> str:
        path = self.staging / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, data)
        return rel

    def write_text(self, rel: str, text: str) -> str:
        return self.write_bytes(rel, text.encode("utf-8"))

    def commit(self) -> Path:
        """Move the finished folder into place; a folder that became unwritable is an InputError (the staging
        folder is then removed by ``abort``, and an existing target is put back)."""
        old = None
        try:
            if self.target.exists():
                old = self.target.with_name(f".{self.target.name}.old-{os.getpid()}")
                os.rename(self.target, old)
            os.rename(self.staging, self.target)
        except OSError as exc:
            if old is not None and old.exists() and not self.target.exists():
                os.rename(old, self.target)
            raise InputError(f"cannot write {str(self.target)!r}: {exc.strerror or exc}") from None
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        self.committed = True
        self._unlock()
        return self.target

    def abort(self) -> None:
        if not self.committed:
            shutil.rmtree(self.staging, ignore_errors=True)
        self._unlock()

    def __enter__(self) -> OutputDir:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.abort()  # no-op after commit(); removes the staging folder on any failure
