"""The locks that let several processes share one cache folder (CLI and app, parsing workers, Ray
workers on a shared disk) without one deleting what another reads.

Readers: :func:`hold_shared` takes a shared ``flock`` on the entry's open file before reading it.
The lock belongs to the open file, and the memory mapping of the columns keeps a duplicate of its
descriptor, so the entry stays locked for as long as a loaded job maps it, not just while it is
opened. The evictor (:func:`remove_unless_in_use`) opens the entry itself and asks for an exclusive
lock without waiting: an entry a reader holds is skipped, one it gets is deleted while it holds the
lock. A reader that opened the file just before the deletion waits for it (microseconds) and then
finds its file unlinked (``st_nlink == 0``): a cache miss, the file is parsed again, never an error.

Windows has no ``flock``, and needs none: it refuses to delete a file that is open or mapped, so
the evictor's delete fails (and it skips the entry) exactly when a reader holds it.

On a local POSIX volume a deleted entry that some process still maps costs nothing to that process
(the file lives on until it is unmapped); only its disk space comes back later. On NFS (a shared
``--cache-dir`` for Ray workers) ``flock`` is emulated with record locks, which hold across machines
while an entry is being opened but lapse when the reader closes its descriptor after mapping (the
mapping's own descriptor does not keep a record lock), and a file deleted by another machine is gone
for readers there too: give processes on several machines that share one cache folder a cap it
never reaches, or prune it only while no job is open.

:func:`exclusive` serialises eviction passes: two passes at once would both see the same total
and both delete down to the cap.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

LOCK_NAME = ".evict.lock"
WAIT_S = 30.0  # for another pass to finish; a pass takes milliseconds, a lost lock skips one pass


def hold_shared(fd: int) -> bool:
    """Mark the open entry ``fd`` as being read; False if it was deleted meanwhile (read nothing)."""
    if fcntl is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)  # waits only while an evictor deletes this very file
        except OSError:  # a file system without locks: read on (a deletion is harmless on POSIX)
            pass
    return os.fstat(fd).st_nlink > 0


def remove_unless_in_use(path: Path) -> bool:
    """Delete the file ``path`` unless a reader holds it; True if it is gone (or was already)."""
    if fcntl is None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            return True
        except PermissionError:  # Windows: open or mapped by a reader
            return False
        return True
    try:
        fd = _open_for_lock(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # a reader holds it
        except OSError:
            pass  # no locks here: delete, which a POSIX reader survives
        # the name may meanwhile belong to a fresh entry (a writer replaced it): leave that one
        if os.stat(path).st_ino != os.fstat(fd).st_ino:
            return False
        os.unlink(path)
        return True
    except FileNotFoundError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _open_for_lock(path: Path) -> int:
    """Open for writing where allowed (nothing is written): NFS emulates ``flock`` with record
    locks, and an exclusive record lock needs a descriptor open for writing."""
    try:
        return os.open(path, os.O_RDWR)
    except PermissionError:
        return os.open(path, os.O_RDONLY)


@contextlib.contextmanager
def exclusive(root: Path, wait_s: float = WAIT_S) -> Iterator[bool]:
    """Hold the cache folder's eviction lock; yields False (run nothing) if it could not be had."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd = os.open(root / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        yield False
        return
    got = False
    try:
        deadline = time.monotonic() + wait_s
        while True:
            got = _try_lock(fd)
            if got or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        yield got
    finally:
        if got:
            _unlock(fd)
        os.close(fd)


def _try_lock(fd: int) -> bool:
    if fcntl is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False
        except OSError:
            return True  # no locks on this file system: run unserialised rather than never
    import msvcrt

    try:
        msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        return True
    except OSError:
        return False


def _unlock(fd: int) -> None:
    if fcntl is not None:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        return
    import msvcrt

    with contextlib.suppress(OSError):
        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
