"""Where the parse cache lives and how big it may grow: one :class:`CacheConfig` object, passed to
the loader as an argument (never through environment variables between Lumos's own modules).

The user overrides, in order: an explicit argument (``--cache-dir``, ``--cache-max``), then
``LUMOS_CACHE_DIR`` / ``LUMOS_CACHE_MAX``, then the app's saved setting, then the defaults: the
platform's user cache folder, and a cap of 10 % of the volume that holds it, at most 20 GB.

Free space is guarded apart from the cap: an entry is not written if the volume would keep less
than :func:`free_floor` (1 GB, or 5 % of a volume smaller than 20 GB), because a full disk breaks
far more than Lumos. The volume's figures come from ``shutil.disk_usage`` (tests replace it).
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from lumos_core.errors import LumosError

GB = 1000**3
DEFAULT_SHARE = 0.10  # of the cache volume's size
DEFAULT_MAX = 20 * GB
FLOOR_BYTES = 1 * GB
FLOOR_SHARE = 0.05
SIZE_HELP = "e.g. 20G, 500M, 1.5GB, 2GiB, or 10%% of the cache volume; 0 keeps nothing"

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": GB,
    "gb": GB,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z%]*)\s*$", re.IGNORECASE)


def default_root() -> Path:
    """``LUMOS_CACHE_DIR`` if set (a user override; the tests use it), else the user cache folder."""
    env = os.environ.get("LUMOS_CACHE_DIR")
    return Path(env) if env else Path(platformdirs.user_cache_dir("lumos", appauthor=False))


def volume_usage(path: Path) -> tuple[int, int] | None:
    """(total, free) bytes of the volume holding ``path`` (or its nearest existing parent), or None."""
    p = Path(path).absolute()
    while not p.exists() and p.parent != p:
        p = p.parent
    try:
        u = shutil.disk_usage(p)
    except OSError:
        return None
    return int(u.total), int(u.free)


def parse_size(text: str | int, volume_total: int | None = None, what: str = "--cache-max") -> int:
    """Bytes of a size such as ``20G``, ``500MB``, ``2GiB`` (k/M/G/T are powers of 1000, KiB/MiB/GiB
    of 1024) or ``10%`` of the volume; LumosError if it is none of these."""
    if isinstance(text, int):
        return max(0, text)
    m = _SIZE.match(text)
    unit = m.group(2).lower() if m else ""
    if m is None or (unit not in _UNITS and unit != "%"):
        raise LumosError(f"{what}: cannot read {text!r} as a size ({SIZE_HELP.replace('%%', '%')})")
    value = float(m.group(1))
    if unit == "%":
        if volume_total is None:
            raise LumosError(f"{what}: {text!r} is a share of the cache volume, whose size is unknown")
        return int(volume_total * value / 100)
    return int(value * _UNITS[unit])


def format_size(n: float) -> str:
    """``171.2 MB``: powers of 1000, as disks are sold and as ``--cache-max`` reads them."""
    for unit, scale in (("GB", GB), ("MB", 1000**2), ("kB", 1000)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def free_floor(volume_total: int) -> int:
    """Free bytes a cache write must leave on its volume: 1 GB, or 5 % of a small volume."""
    return int(min(FLOOR_BYTES, FLOOR_SHARE * volume_total))


def free_space_problem(root: Path, need: int) -> str | None:
    """Why writing ``need`` more bytes under ``root`` would leave its volume too full, or None.

    The reason reads after ``not cached: `` (``0.4 GB free on /home (Lumos keeps 1.0 GB free)``)."""
    usage = volume_usage(root)
    if usage is None:
        return None  # unknown: let the write try (and fail quietly if the disk is full)
    total, free = usage
    if total == 0:  # /proc, /sys and the like: a folder there stores nothing, whatever the floor says
        return f"{root} is on a volume of 0 bytes, not a disk (set --cache-dir or LUMOS_CACHE_DIR to a folder on one)"
    floor = free_floor(total)
    if free - need >= floor:
        return None
    return (
        f"{f'{free / GB:.1f} GB' if free >= GB / 10 else format_size(free)} free on {root} (Lumos keeps {format_size(floor)} free on the cache's "
        "volume; free space, or bound the cache with --cache-max / LUMOS_CACHE_MAX)"
    )


@dataclass(frozen=True)
class CacheConfig:
    """The parse cache's folder and size cap (``max_bytes`` None: the default share of the volume).
    ``origin`` says where the cap came from (shown by ``lumos cache info`` and ``--doctor``)."""

    root: Path
    max_bytes: int | None = None
    origin: str = ""

    @classmethod
    def resolve(
        cls,
        root: Path | str | None = None,
        max_size: str | int | None = None,
        setting: str | None = None,
    ) -> CacheConfig:
        """The configuration from explicit arguments, else the environment, else ``setting`` (the
        app's saved preference), else the defaults. A size that cannot be read raises LumosError."""
        folder = Path(root) if root is not None else default_root()
        env = os.environ.get("LUMOS_CACHE_MAX", "").strip()
        for value, origin in (
            (max_size, "--cache-max"),
            (env or None, "LUMOS_CACHE_MAX"),
            ((setting or "").strip() or None, "app setting"),
        ):
            if value is not None and value != "":
                usage = volume_usage(folder)
                size = parse_size(value, usage[0] if usage else None, what=origin)
                return cls(folder, size, f"{origin} {value}")
        return cls(folder)

    def cap(self) -> int:
        """The cap in bytes on disk."""
        if self.max_bytes is not None:
            return self.max_bytes
        usage = volume_usage(self.root)
        if usage is None:
            return DEFAULT_MAX
        return int(min(DEFAULT_SHARE * usage[0], DEFAULT_MAX))

    def describe_cap(self) -> str:
        """``7.9 GB (default: 10 % of the cache volume, at most 20 GB)``."""
        if self.max_bytes is not None:
            return format_size(self.max_bytes) + (f" ({self.origin})" if self.origin else "")
        return f"{format_size(self.cap())} (default: 10 % of the cache volume, at most 20 GB)"
