"""Which shared libraries an ELF file (a Qt plugin or library) needs, and which of them cannot load.

This is what ``ldd`` answers, in Python: the check runs before Qt is started, so that a missing
system library is named instead of ending in Qt's abort. It reads each file's ``DT_NEEDED`` entries
(no external tool, works where ``ldd`` is absent), follows Qt's own libraries inside the Qt folder,
and asks the system's dynamic loader (``ctypes``) for everything else, so ``LD_LIBRARY_PATH``,
``ld.so.cache`` and multiarch folders count exactly as they will when Qt loads the plugin.
"""

from __future__ import annotations

import ctypes
import mmap
import re
import struct
from collections.abc import Iterable
from pathlib import Path

SHT_DYNAMIC = 6
DT_NULL = 0
DT_NEEDED = 1
_MISSING_RE = re.compile(r"([^\s:]+\.so[^\s:]*): cannot open shared object file")


def needed(path: str | Path) -> list[str] | None:
    """The sonames ``path`` lists as DT_NEEDED, in order; None if it is not a readable ELF file."""
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return _needed(data)
    except (OSError, ValueError):  # unreadable, or empty (mmap refuses size 0)
        return None


def _needed(data: mmap.mmap) -> list[str] | None:
    if data[:4] != b"\x7fELF" or len(data) < 64:
        return None
    is64 = data[4] == 2
    end = "<" if data[5] == 1 else ">"
    try:
        if is64:
            (shoff,) = struct.unpack_from(end + "Q", data, 0x28)
            shentsize, shnum = struct.unpack_from(end + "HH", data, 0x3A)
            sec = struct.Struct(end + "IIQQQQIIQQ")
            dyn = struct.Struct(end + "qQ")
        else:
            (shoff,) = struct.unpack_from(end + "I", data, 0x20)
            shentsize, shnum = struct.unpack_from(end + "HH", data, 0x2E)
            sec = struct.Struct(end + "IIIIIIIIII")
            dyn = struct.Struct(end + "iI")
        sections = [sec.unpack_from(data, shoff + i * shentsize) for i in range(shnum)]
        names: list[str] = []
        for s in sections:
            if s[1] != SHT_DYNAMIC:
                continue
            offset, size, link = s[4], s[5], s[6]
            strtab_offset = sections[link][4]
            for pos in range(offset, offset + size, dyn.size):
                tag, value = dyn.unpack_from(data, pos)
                if tag == DT_NULL:
                    break
                if tag == DT_NEEDED:
                    start = strtab_offset + value
                    stop = data.find(b"\0", start)
                    names.append(data[start:stop].decode("utf-8", "replace"))
        return names
    except (struct.error, IndexError, ValueError):
        return None


def loader_error(soname: str) -> str | None:
    """None if the dynamic loader can load ``soname``, else its message."""
    try:
        ctypes.CDLL(soname)
    except OSError as exc:
        return str(exc)
    return None


def missing_libraries(roots: Iterable[str | Path], search_dirs: Iterable[str | Path] = ()) -> list[str]:
    """Sonames that ``roots`` need (directly or through libraries found in ``search_dirs``, such as
    Qt's own lib folder) and that the dynamic loader cannot find.

    A system library that is present but needs a missing one of its own is reported by the missing
    one's name (taken from the loader's message), since that is what has to be installed.
    """
    dirs = [Path(d) for d in search_dirs]
    missing: list[str] = []
    seen: set[str] = set()
    queue = [Path(r) for r in roots]
    while queue:
        path = queue.pop(0)
        for soname in needed(path) or []:
            if soname in seen:
                continue
            seen.add(soname)
            local = next((d / soname for d in dirs if (d / soname).is_file()), None)
            if local is not None:
                queue.append(local)
                continue
            error = loader_error(soname)
            if error is None:
                continue
            named = _MISSING_RE.search(error)
            culprit = named.group(1) if named else soname
            if culprit not in missing:
                missing.append(culprit)
    return missing
