"""Give back the disk under a file's first bytes, in place: the file's name, size and offsets stay as they were.

A long ``--light`` job's event file is appended to by the script's hooks through
a descriptor they keep open; renaming it away would leave them writing into a
file no one reads. Instead, once its lines are read, the blocks under them are
given back (``fallocate`` with ``FALLOC_FL_PUNCH_HOLE``, Linux: ext4, xfs,
btrfs, tmpfs, overlayfs on these). Those bytes then read as zeros, and the disk
the file takes stays bounded whatever its length. Where the file system or the
system cannot, ``punch_hole`` raises ``OSError`` with the reason.
"""

from __future__ import annotations

import ctypes
import errno
import os
from pathlib import Path

_FALLOC_FL_KEEP_SIZE, _FALLOC_FL_PUNCH_HOLE = 0x01, 0x02


def _fallocate() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    try:
        function = ctypes.CDLL(None, use_errno=True).fallocate
    except (AttributeError, OSError):  # not glibc or musl on Linux
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    function.restype = ctypes.c_int
    return function


_FALLOCATE = _fallocate()


def punch_hole(path: Path, length_bytes: int) -> int:
    """Free the blocks under ``path``'s first ``length_bytes`` (rounded down to whole blocks); the bytes freed."""
    if _FALLOCATE is None:
        raise OSError(errno.ENOSYS, "this system has no fallocate() to free part of a file")
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        block = os.fstat(fd).st_blksize or 4096
        length = length_bytes // block * block
        if length and _FALLOCATE(fd, _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE, 0, length) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
        return length
    finally:
        os.close(fd)


def disk_bytes(path: Path) -> int:
    """The disk a file takes (its allocated blocks), not its length."""
    return os.stat(path).st_blocks * 512
