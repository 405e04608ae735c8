"""The output folder of an offline command, checked before anything is computed.

`OutFolder.prepare` runs first: the folder is made if missing, refused when it is a
symbolic link or not a folder, and proven writable by creating (exclusively) and removing
a file in it, so that a read-only or missing place is one line before any simulation,
not an error after it. The folder is then held open: every file is created relative to
that handle, so renaming or swapping the path meanwhile cannot move the writes elsewhere.

Each file is written to a fresh temporary name in the folder (O_CREAT | O_EXCL |
O_NOFOLLOW: never an existing file, never through a link) and renamed over its final
name when complete. A symbolic link planted at a final name (`requests.csv -> /etc/...`)
is replaced by the file, its target left untouched. A file being streamed (requests.csv,
row by row as requests end) keeps its temporary name (`.requests.csv.PID.partial`) until
the run ends, so a run killed outright leaves the rows it had.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import os
import stat
import time
from pathlib import Path
from typing import IO, Any

_COUNTER = itertools.count()


class OutFolderError(ValueError):
    """The output folder cannot take the run's files (a one-line reason)."""


class OutFolder:
    """An output folder, checked and held open (see the module's docstring)."""

    def __init__(self, path: Path, fd: int, made: bool) -> None:
        self.path = path
        self._fd = fd
        self._made = made
        self.written: list[str] = []

    @classmethod
    def prepare(cls, path: Path, flag: str = "--out") -> OutFolder:
        """The folder at `path`, made if missing; OutFolderError if it cannot be written."""
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            info = None
        except OSError as error:
            raise OutFolderError(f"{flag} {path}: {error.strerror or error}") from None
        if info is not None and stat.S_ISLNK(info.st_mode):
            raise OutFolderError(
                f"{flag} {path} is a symbolic link: give the folder itself (no link is "
                "followed out of the output folder)"
            )
        if info is not None and not stat.S_ISDIR(info.st_mode):
            raise OutFolderError(f"{flag} {path} is a file, not a folder")
        made = False
        if info is None:
            try:
                path.mkdir(parents=True)
                made = True
            except FileExistsError:
                pass  # made meanwhile: checked below like any folder
            except OSError as error:
                raise OutFolderError(
                    f"{flag} {path}: cannot make the folder: {error.strerror or error}"
                ) from None
        flags = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_NOFOLLOW", 0)
        try:
            fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0))
        except OSError as error:
            raise OutFolderError(f"{flag} {path}: {error.strerror or error}") from None
        folder = cls(path, fd, made)
        try:
            folder._probe()
        except OSError as error:
            folder.discard()
            raise OutFolderError(
                f"{flag} {path} is not writable: {error.strerror or error}"
            ) from None
        return folder

    def _probe(self) -> None:
        name = self._temporary("probe")
        fd = self._create(name)
        os.close(fd)
        os.unlink(name, dir_fd=self._fd)

    def _temporary(self, name: str) -> str:
        return f".{name}.{os.getpid()}.{next(_COUNTER)}.partial"

    def _create(self, name: str) -> int:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        return os.open(name, flags | getattr(os, "O_CLOEXEC", 0), 0o644, dir_fd=self._fd)

    def stage(self, name: str, binary: bool = False) -> Staged:
        """A new file that becomes `name` when committed (see Staged)."""
        return Staged(self, name, binary)

    def write_text(self, name: str, text: str) -> Path:
        with self.stage(name) as handle:
            handle.write(text)
        return self.path / name

    def write_bytes(self, name: str, data: bytes) -> Path:
        with self.stage(name, binary=True) as handle:
            handle.write(data)
        return self.path / name

    def remove(self, name: str) -> None:
        """Removes an earlier run's `name` (a link itself, never its target), if any."""
        with contextlib.suppress(FileNotFoundError, IsADirectoryError):
            os.unlink(name, dir_fd=self._fd)  # a folder of that name is left alone

    def _commit(self, temporary: str, name: str) -> None:
        os.replace(temporary, name, src_dir_fd=self._fd, dst_dir_fd=self._fd)
        self.written.append(name)

    def _abandon(self, temporary: str) -> None:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=self._fd)

    def discard(self) -> None:
        """Closes the folder; removes it when this run made it and wrote nothing in it."""
        self.close()
        if self._made and not self.written:
            with contextlib.suppress(OSError):
                self.path.rmdir()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:
        self.close()


class Staged:
    """A file written under a temporary name in the folder, renamed to `name` by
    `commit()` (or on leaving a `with` block normally); `abandon()` removes it."""

    def __init__(self, folder: OutFolder, name: str, binary: bool) -> None:
        self._folder = folder
        self.name = name
        self.temporary = folder._temporary(name)
        fd = folder._create(self.temporary)
        self.handle: IO[Any] = (
            os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", newline="", encoding="utf-8")
        )
        self._flushed = time.monotonic()
        self.done = False

    def flush_now_and_then(self, every: float = 0.25) -> None:
        """Flushes what was written, at most every `every` seconds (streamed files)."""
        now = time.monotonic()
        if now - self._flushed >= every:
            self.handle.flush()
            self._flushed = now

    def commit(self) -> Path:
        if not self.done:
            self.done = True
            self.handle.close()
            self._folder._commit(self.temporary, self.name)
        return self._folder.path / self.name

    def abandon(self) -> None:
        if not self.done:
            self.done = True
            self.handle.close()
            self._folder._abandon(self.temporary)

    def __enter__(self) -> IO[Any]:
        return self.handle

    def __exit__(self, kind: object, *_: object) -> None:
        if kind is None:
            self.commit()
        else:
            self.abandon()


def png_bytes(figure: Any) -> bytes:
    """A matplotlib figure as PNG bytes (written by OutFolder, never by path)."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()
