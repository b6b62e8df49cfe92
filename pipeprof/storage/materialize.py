"""Build a derived data set once into the cache, atomically, and check it on reuse.

Every cached data set (the synthetic arrays, the ``files`` tree, the
``images`` tree) lives in ``<cache_root>/<kind>-<key>/`` where ``key`` is the
first 12 hex digits of a SHA-1 over the parameters that change its bytes
(kind, samples, seed, generator version, image format, ...). So a new
parameter value never reuses stale data, and equal parameters always do.

A build writes into a hidden temporary sibling, writes ``manifest.json``
last (the parameters, the counts, the bytes, a cheap checksum and the sizes
of a few spot-checked files), and only then renames the folder into place.
A crash or an error mid-build leaves the previous folder untouched and the
temporary one removed. On reuse the manifest and a few cheap facts (file
counts, spot sizes, the checksum) are checked; a cache that fails any of
them is rebuilt beside it and swapped in, never trusted.

Builders of the same key serialize on a lock file so two runs sharing a
cache do not build it twice; a valid cache is reused without the lock (and
without writing anything), so a read-only cache folder still works.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import shutil
import socket
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pipeprof.errors import UsageError

Progress = Callable[[str, int, int], None]  # (what, done, total); same as storage.base.Progress
Writer = Callable[[Path, "Progress | None"], dict]  # fills a folder, returns manifest facts
Checker = Callable[[Path, dict], "str | None"]  # why a folder is not valid, or None

MANIFEST = "manifest.json"
MANIFEST_VERSION = 1
PROGRESS_EVERY = 500  # items between progress callbacks: cheap for rich, smooth enough for a bar
SPOT_CHECKS = 32  # files whose size is checked on reuse (plus the first and last, which are hashed)
# Errors that mean "this folder cannot take the cache" (as opposed to a bug or a damaged source).
_CANNOT_WRITE = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.ENOTDIR}


def cache_key(params: Mapping[str, Any]) -> str:
    """12 hex digits of SHA-1 over the parameters as canonical JSON."""
    text = json.dumps(dict(params), sort_keys=True, separators=(",", ":"))
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def cache_folder(root: Path, params: Mapping[str, Any]) -> Path:
    """Where the data set for ``params`` (which hold its ``kind``) lives under ``root``."""
    return Path(root) / f"{params['kind']}-{cache_key(params)}"


def not_writable(folder: Path, error: OSError) -> UsageError:
    """The one-line error for a cache folder that cannot be created or written."""
    reason = error.strerror or type(error).__name__
    return UsageError(f"cache folder {folder} is not writable ({reason}): "
                      f"choose another with --cache or $PIPEPROF_CACHE")


def tick(progress: Progress | None, what: str, done: int, total: int) -> None:
    """Report progress every ``PROGRESS_EVERY`` items and at the end, not per item."""
    if progress is not None and (done % PROGRESS_EVERY == 0 or done == total):
        progress(what, done, total)


def spot_indices(count: int) -> list[int]:
    """A few evenly spaced sample indices, always including the first and the last."""
    if count <= 0:
        return []
    step = max(1, (count - 1) // (SPOT_CHECKS - 1))
    return sorted(set(range(0, count, step)) | {count - 1})


def checksum(paths: list[Path]) -> str:
    """SHA-1 over the bytes of a few files: cheap, and catches rewritten or truncated ends."""
    digest = hashlib.sha1()
    for path in paths:
        digest.update(path.read_bytes())
    return digest.hexdigest()


def check_files(folder: Path, manifest: dict, relpath: Callable[[int], str]) -> str | None:
    """Spot sizes and the first/last checksum recorded by ``tree_facts`` still hold."""
    for index, size in manifest["spot_sizes"]:
        path = folder / relpath(index)
        if not path.is_file():
            return f"{relpath(index)} is missing"
        if path.stat().st_size != size:
            return f"{relpath(index)} has {path.stat().st_size} bytes, expected {size}"
    count = manifest["count"]
    if count and checksum([folder / relpath(0), folder / relpath(count - 1)]) != manifest["checksum"]:
        return "the first or last file changed (checksum differs)"
    return None


def tree_facts(folder: Path, count: int, total_bytes: int, relpath: Callable[[int], str]) -> dict:
    """Manifest facts for a tree of one file per sample, checked later by ``check_files``."""
    spots = [[i, (folder / relpath(i)).stat().st_size] for i in spot_indices(count)]
    ends = [folder / relpath(0), folder / relpath(count - 1)] if count else []
    return {"count": count, "total_bytes": total_bytes, "spot_sizes": spots, "checksum": checksum(ends)}


def read_manifest(folder: Path) -> dict | None:
    """The folder's manifest, or None when it is absent or unreadable."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


def why_invalid(folder: Path, params: Mapping[str, Any], check: Checker | None) -> str | None:
    """None when ``folder`` holds a complete data set for ``params``, else the reason in words."""
    if not folder.is_dir():
        return "not built yet"
    manifest = read_manifest(folder)
    if manifest is None:
        return "no readable manifest (partial or damaged)"
    if manifest.get("manifest_version") != MANIFEST_VERSION:
        return "manifest from another pipeprof version"
    if manifest.get("params") != json.loads(json.dumps(dict(params))):
        return "manifest parameters differ"
    if check is None:
        return None
    try:
        return check(folder, manifest)
    except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
        # A damaged cache can fail in many ways; each one only means "rebuild".
        return f"check failed ({type(e).__name__}: {e})"


def materialize(root: Path, params: Mapping[str, Any], write: Writer, check: Checker | None = None,
                progress: Progress | None = None, label: str | None = None) -> Path:
    """The folder holding the data set for ``params``, built first if absent or invalid.

    ``write(folder, progress)`` fills an empty folder and returns the manifest
    facts (at least ``count``, ``total_bytes`` and ``checksum``);
    ``check(folder, manifest)`` returns why a folder that has a matching
    manifest is still not valid, or None. Raises ``UsageError`` when the cache
    root cannot be written.
    """
    root = Path(root)
    folder = cache_folder(root, params)
    if why_invalid(folder, params, check) is None:
        return folder  # the common case: no lock, no writes
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise not_writable(root, e) from None
    with _lock(root / f".{folder.name}.lock"):
        reason = why_invalid(folder, params, check)  # another process may have built it meanwhile
        if reason is None:
            return folder
        _remove_leftovers(root, folder.name)  # we hold the lock: any temporary sibling is stale
        # The CLI shows "building <what>"; a rebuild says why, since it means the cache was damaged.
        what = label or str(params["kind"])
        what = what if reason == "not built yet" else f"{what} again: {reason}"
        tmp = root / f".{folder.name}.tmp-{socket.gethostname()}-{os.getpid()}"
        try:
            tmp.mkdir()
            facts = write(tmp, _labelled(progress, what))
            manifest = {"manifest_version": MANIFEST_VERSION, "kind": params["kind"], "key": folder.name,
                        "params": dict(params), **facts}
            _write_json(tmp / MANIFEST, manifest)
            if (bad := why_invalid(tmp, params, check)) is not None:
                raise RuntimeError(f"pipeprof bug: the data set just built in {tmp} fails its own check: {bad}")
            _swap_in(tmp, folder)
        except OSError as e:
            if e.errno in _CANNOT_WRITE:
                raise not_writable(root, e) from None
            raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)  # gone already after a successful swap
    return folder


def _labelled(progress: Progress | None, what: str) -> Progress | None:
    """Forward progress with the build's description (which says why it is being built)."""
    if progress is None:
        return None
    return lambda _what, done, total: progress(what, done, total)


def _write_json(path: Path, data: dict) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, sort_keys=True, indent=1)
        f.flush()
        os.fsync(f.fileno())  # the manifest marks the data complete: it must not outlive a crash unwritten


def _swap_in(tmp: Path, folder: Path) -> None:
    """Rename ``tmp`` to ``folder``; an invalid old ``folder`` is moved aside first, then removed."""
    old = None
    if folder.exists():
        old = folder.with_name(f".{folder.name}.old-{os.getpid()}")
        os.rename(folder, old)  # a directory cannot be replaced in one rename unless empty
    os.rename(tmp, folder)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _remove_leftovers(root: Path, name: str) -> None:
    for stale in root.glob(f".{name}.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    for stale in root.glob(f".{name}.old-*"):
        shutil.rmtree(stale, ignore_errors=True)


@contextmanager
def _lock(path: Path) -> Iterator[None]:
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise not_writable(path.parent, e) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock
