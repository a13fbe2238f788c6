"""An output folder that appears whole or not at all.

Files are written into a staging folder beside the target; ``commit()`` renames it into place. An
existing target is refused unless ``force``, in which case it is replaced only at commit time, so a run
that fails leaves the previous report untouched.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from fedaudit.errors import InputError
from fedaudit.io.files import atomic_write_bytes


class OutputDir:
    def __init__(self, target: str | Path, force: bool = False):
        self.target = Path(target)
        if self.target.exists():
            if not self.target.is_dir():
                raise InputError(f"output {str(self.target)!r} exists and is not a folder")
            if not force:
                raise InputError(f"output folder {str(self.target)!r} already exists; pass --force to replace it")
        parent = self.target.parent
        if not parent.is_dir():
            raise InputError(f"cannot write {str(self.target)!r}: folder {str(parent)!r} does not exist")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise InputError(f"cannot write {str(self.target)!r}: folder {str(parent)!r} is not writable")
        try:
            self.staging = Path(tempfile.mkdtemp(prefix=f".{self.target.name}.", suffix=".partial", dir=parent))
        except OSError as exc:
            raise InputError(f"cannot write {str(self.target)!r}: {exc.strerror or exc}") from None
        self.committed = False

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
        return self.target

    def abort(self) -> None:
        if not self.committed:
            shutil.rmtree(self.staging, ignore_errors=True)

    def __enter__(self) -> OutputDir:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.abort()  # no-op after commit(); removes the staging folder on any failure
