"""The page cache: how much of a data set it holds, and dropping it for a cold run.

``resident_bytes(paths)`` asks the kernel with ``mincore(2)`` (through ctypes,
on a throwaway read-only map of each file) how many bytes of the files are in
the page cache. ``drop(paths)`` evicts them with
``posix_fadvise(POSIX_FADV_DONTNEED)`` (no root needed) and checks with
``resident_bytes`` that it worked.

What the kernel will not do, and what to do about it:

* A page that a live memory map still maps is not evicted. Drop *before* the
  DataLoader and its workers open the files (persistent workers and an open
  ``np.memmap`` keep their maps across epochs).
* A dirty page (just written, not yet on disk) is not evicted either; ``drop``
  flushes with ``os.sync()`` and advises again when pages stay behind.
* Since Linux 5.0, ``mincore`` reports every page as resident for a file the
  caller neither owns nor may write (a side-channel guard). Such a file is not
  measured: ``resident_bytes`` returns None and ``measure_resident`` says why.
* On tmpfs the page cache *is* the storage: nothing can be dropped.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import mmap
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pipeprof import format as fmt

# At most this fraction of the data set's bytes may stay in the page cache for
# a drop to count as done: a few pages come back at once (file metadata, a
# concurrent reader) and a cold run is not warmed by them.
RESIDENT_TOLERANCE_FRACTION = 0.05

PAGE_BYTES = mmap.PAGESIZE
# Files are measured in windows of this many bytes, so the mincore vector
# (one byte per page) stays small for a file of any size. A multiple of the page size.
_WINDOW_BYTES = 1 << 30

PathLike = str | os.PathLike


@dataclass(frozen=True)
class DropResult:
    """What ``drop`` did. ``reason`` is None exactly when the drop is done and verified.

    ``dropped`` is True when at most ``RESIDENT_TOLERANCE_FRACTION`` of
    ``bytes_total`` stayed resident, or when the advice was given but could not
    be verified (``resident_after_bytes`` None; ``reason`` says why).
    """

    files: int
    bytes_total: int
    resident_before_bytes: int | None
    resident_after_bytes: int | None
    dropped: bool
    reason: str | None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# ---- mincore through ctypes ------------------------------------------------------------


class _Libc:
    """``mmap``, ``munmap`` and ``mincore`` from the C library, with their C signatures."""

    def __init__(self) -> None:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        self.mmap = libc.mmap
        self.mmap.restype = ctypes.c_void_p
        self.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int, ctypes.c_long]  # off_t is a long on LP64 and 32-bit Linux
        self.munmap = libc.munmap
        self.munmap.restype = ctypes.c_int
        self.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        self.mincore = libc.mincore
        self.mincore.restype = ctypes.c_int
        self.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
        self.map_failed = ctypes.c_void_p(-1).value


_libc: _Libc | None = None
_libc_absence: str | None = None


def mincore_unavailable() -> str | None:
    """Why ``mincore`` cannot be called here (no such C function, no mmap flags), or None."""
    global _libc, _libc_absence
    if _libc is None and _libc_absence is None:
        if not hasattr(mmap, "MAP_SHARED") or not hasattr(mmap, "PROT_READ"):
            _libc_absence = "mmap has no MAP_SHARED/PROT_READ on this platform"
        else:
            try:
                _libc = _Libc()
            except OSError as e:
                _libc_absence = f"the C library could not be loaded: {e}"
            except AttributeError as e:  # ctypes raises it for a missing symbol
                _libc_absence = f"the C library has no mincore/mmap: {e}"
    return _libc_absence


# Low bit of each mincore byte is "resident"; the other bits are reserved.
_LOW_BIT = bytes(b & 1 for b in range(256))


class _Vector:
    """The mincore output buffer (one byte per page), grown on demand; one per call, so thread-safe."""

    def __init__(self) -> None:
        self.buf = (ctypes.c_ubyte * 0)()

    def at_least(self, pages: int) -> ctypes.Array:
        if len(self.buf) < pages:
            self.buf = (ctypes.c_ubyte * max(pages, 2 * len(self.buf)))()
        return self.buf


def _file_resident_bytes(libc: _Libc, vec: _Vector, fd: int, size_bytes: int) -> int:
    """Bytes of the open file ``fd`` in the page cache (raises OSError)."""
    resident = 0
    for offset in range(0, size_bytes, _WINDOW_BYTES):
        length = min(_WINDOW_BYTES, size_bytes - offset)
        addr = libc.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd, offset)
        if addr is None or addr == libc.map_failed:
            err = ctypes.get_errno()
            raise OSError(err, f"mmap: {os.strerror(err)}")
        pages = (length + PAGE_BYTES - 1) // PAGE_BYTES
        buf = vec.at_least(pages)
        try:
            if libc.mincore(addr, length, buf) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"mincore: {os.strerror(err)}")
        finally:
            libc.munmap(addr, length)
        flags = ctypes.string_at(buf, pages).translate(_LOW_BIT)
        resident += flags.count(1) * PAGE_BYTES
        if flags[-1]:  # the last page is only partly the file's
            resident -= pages * PAGE_BYTES - length
    return resident


def measure_resident(paths: Iterable[PathLike]) -> tuple[int | None, str | None]:
    """``(bytes of these files in the page cache, None)``, or ``(None, why it cannot be measured)``.

    A file that cannot be opened raises OSError (the data set is broken; say so).
    """
    absence = mincore_unavailable()
    if absence is not None:
        return None, absence
    assert _libc is not None
    euid = os.geteuid() if hasattr(os, "geteuid") else -1
    vec = _Vector()
    total = 0
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            st = os.fstat(fd)
            if st.st_size == 0:
                continue  # nothing to cache; mmap of zero bytes fails
            if euid not in (0, st.st_uid) and not os.access(path, os.W_OK):
                return None, (f"{path}: mincore reports every page as resident for a file this user "
                              "neither owns nor may write (Linux >= 5.0), so residency cannot be measured")
            try:
                total += _file_resident_bytes(_libc, vec, fd, st.st_size)
            except OSError as e:  # e.g. ENODEV: a file system that cannot be memory-mapped
                return None, f"{path}: {e.strerror}"
        finally:
            os.close(fd)
    return total, None


def resident_bytes(paths: Iterable[PathLike]) -> int | None:
    """Bytes of these files now in the page cache (mincore), or None where it cannot be measured."""
    return measure_resident(paths)[0]


# ---- dropping ----------------------------------------------------------------------------


def _advise_dontneed(paths: list[Path]) -> str | None:
    """``POSIX_FADV_DONTNEED`` on every file; the first failure in words, or None."""
    failures: list[str] = []
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
        except AttributeError:
            return "os.posix_fadvise is not available on this platform: the page cache cannot be dropped"
        except OSError as e:
            failures.append(f"{path}: {e.strerror or e}")
    if failures:
        more = f" (and {len(failures) - 1} more files)" if len(failures) > 1 else ""
        return f"POSIX_FADV_DONTNEED failed: {failures[0]}{more}"
    return None


def _still_resident(paths: list[Path]) -> list[Path]:
    still = []
    for path in paths:
        resident = resident_bytes([path])
        if resident:
            still.append(path)
    return still


def drop(paths: Iterable[PathLike]) -> DropResult:
    """Evict these files from the page cache, then measure what stayed (see the module docstring).

    Call it before the DataLoader (and its workers) open the files: mapped pages stay.
    """
    files = [Path(p) for p in paths]
    bytes_total = sum(p.stat().st_size for p in files)
    before, _ = measure_resident(files)

    failure = _advise_dontneed(files)
    if failure is not None:
        after, _ = measure_resident(files)
        return DropResult(len(files), bytes_total, before, after, False, failure)

    after, why_unmeasured = measure_resident(files)
    if after is not None and after > RESIDENT_TOLERANCE_FRACTION * bytes_total:
        # Dirty pages (a data set written moments ago) are skipped by the
        # advice; flush them and advise again. Mapped pages stay regardless.
        still = _still_resident(files)
        os.sync()
        failure = _advise_dontneed(still)
        after, why_unmeasured = measure_resident(files)
        if failure is not None:
            return DropResult(len(files), bytes_total, before, after, False, failure)

    if after is None:
        return DropResult(len(files), bytes_total, before, None, True,
                          f"POSIX_FADV_DONTNEED was applied but not verified: {why_unmeasured}")
    if after > RESIDENT_TOLERANCE_FRACTION * bytes_total:
        pct = 100.0 * after / bytes_total
        return DropResult(len(files), bytes_total, before, after, False, (
            f"{pct:.0f}% of the data set ({fmt.byte_size(after)} of {fmt.byte_size(bytes_total)}) is still "
            "in the page cache after POSIX_FADV_DONTNEED: pages mapped by a live memory map "
            "(persistent workers? an open np.memmap?) cannot be evicted, and on tmpfs the page "
            "cache is the storage itself"))
    return DropResult(len(files), bytes_total, before, after, True, None)
