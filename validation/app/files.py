"""Output files and folders: atomic writes, one writer per folder, leftovers of a killed run removed.

- :func:`write_atomically` writes next to the target and renames into place, so a crash never
  leaves a truncated file that looks complete; what a ``kill -9`` leaves behind is a hidden
  temporary named ``.NAME.partial-XXXX``.
- :func:`locked_output` holds an exclusive lock on an output folder while a run or sweep
  writes it: a second writer is refused with one line naming the holder. The lock is an
  ``flock`` on ``.lock`` in the folder, released by the kernel when the holder dies, so a
  killed run never leaves a stale lock; while it is held, the temporaries of earlier, killed
  writers are removed.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import signal
import sys
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from .errors import ConfigError

LOCK = ".lock"

#: What marks a temporary of :func:`write_atomically` (and of a Zarr store being written).
PARTIAL = ".partial"


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Ctrl-C (SIGINT) and SIGTERM wait until the block ends, then act as usual.

    An exception raised inside a write (xarray's ``to_netcdf``) leaves xarray's file lock
    held, and the cleanup that follows waits for that lock forever: an interrupted run hung
    instead of stopping. A write is short, so the signal is only delayed. Outside the main
    thread (where Python runs signal handlers) the block runs as it is.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = {number: signal.signal(number, lambda number, frame: received.append(number))
                for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        if received:
            signal.raise_signal(received[0])  # now handled as it would have been


def write_atomically(path: Path, write: Callable[[Path], None]) -> Path:
    """Call ``write(temporary_path)`` next to ``path``, then rename it into place (signals deferred).

    Raises
    ------
    OSError
        The write failed (a full disk, a quota, a read-only file system): the message names the
        file and the space left; nothing is left in the folder, and what was there is unchanged.
        netCDF's own report of such a failure (``RuntimeError: NetCDF: HDF error``) is one of these.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}{PARTIAL}-", suffix=path.suffix, dir=path.parent)
    os.close(handle)
    try:
        with signals_deferred():
            _write_and_rename(path, Path(temporary), write)
    except RuntimeError as error:
        Path(temporary).unlink(missing_ok=True)
        if not str(error).startswith("NetCDF:"):
            raise
        raise OSError(errno.EIO, f"could not write {path} ({error}; {_space_left(path.parent)})") from None
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


def _space_left(folder: Path) -> str:
    """What a failed write's message says of the file system: the bytes left on it."""
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return "the file system's free space unknown"
    return f"{free} bytes left on its file system" if free else "its file system is full"


def _write_and_rename(path: Path, temporary: Path, write: Callable[[Path], None]) -> None:
    write(temporary)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(temporary, 0o666 & ~umask)  # mkstemp creates 0600; the result is an ordinary file
    os.replace(temporary, path)


def write_text(path: Path, text: str) -> Path:
    return write_atomically(path, lambda temporary: temporary.write_text(text))


def check_output_folder(path: Path, name: str = "output") -> Path:
    """``path`` as a folder this process can write (created if missing); a :class:`ConfigError` otherwise.

    Refused: an existing file that is not a folder, a symbolic link loop, a folder without
    write permission; the message names the argument (``name``) and the reason.
    """
    path = Path(path)
    try:
        if path.exists() and not path.is_dir():
            raise ConfigError(f"{name}: {str(path)!r} is an existing file, not a folder; choose a folder")
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as error:
        reason = error.strerror or str(error)
        if error.errno == errno.ELOOP:
            reason = "a symbolic link loop"
        raise ConfigError(f"{name}: cannot write to {str(path)!r} ({reason})") from None
    except RuntimeError as error:  # pathlib's own loop detection (Python < 3.13)
        raise ConfigError(f"{name}: cannot write to {str(path)!r} ({error})") from None
    return path


@contextmanager
def locked_output(folder: Path, command: str) -> Iterator[None]:
    """Hold ``folder`` for this process while the body writes it; refuse if another process holds it.

    Raises
    ------
    ConfigError
        Another run or sweep is writing ``folder``: the message names its PID and command.
    """
    folder = check_output_folder(folder)
    handle = open(folder / LOCK, "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise ConfigError(f"output: {str(folder)!r} is being written by {holder}; wait for it to finish "
                          f"or give this run another output folder") from None
    try:
        handle.seek(0)
        handle.truncate()
        handle.write(f"PID {os.getpid()} ({command})\n")
        handle.flush()
        remove_partial_files(folder)
        yield
    finally:
        handle.truncate(0)
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()


def remove_partial_files(folder: Path) -> list[Path]:
    """Remove the temporaries killed writers left in ``folder`` and its subfolders; returns them.

    Only call this while holding the folder's lock (no live writer has temporaries then).
    """
    removed = []
    for path in sorted(Path(folder).rglob(f".*{PARTIAL}*")):
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed.append(path)
    if removed:
        print(f"meanfield: removed {len(removed)} unfinished file(s) of an interrupted write in {folder}",
              file=sys.stderr)
    return removed
