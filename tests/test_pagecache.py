"""Page-cache residency and dropping, on real files on a real disk."""

import mmap
import os
from pathlib import Path

import psutil
import pytest

from pipeprof.storage import pagecache
from pipeprof.storage.pagecache import RESIDENT_TOLERANCE_FRACTION, drop, measure_resident, resident_bytes

SIZE_BYTES = 64 << 20
# A read after a drop must come from the disk: the process's read_bytes grows by
# the file's size, give or take 10% (readahead rounds to pages; nothing else
# in this process reads while we measure).
DISK_READ_TOLERANCE = 0.10

_MEMORY_FILESYSTEMS = {"tmpfs", "ramfs", "devtmpfs", "overlay-tmpfs"}


def _filesystem(path: Path) -> str:
    """The type of the file system holding ``path`` (longest mount point in /proc/mounts)."""
    path = os.path.realpath(path)
    best, kind = "", "unknown"
    with open("/proc/mounts") as f:
        for line in f:
            _, mount_point, fs_type, *_ = line.split()
            mount_point = mount_point.replace("\\040", " ")
            inside = path == mount_point or path.startswith(mount_point.rstrip("/") + "/")
            if inside and len(mount_point) > len(best):
                best, kind = mount_point, fs_type
    return kind


@pytest.fixture
def disk_dir(tmp_path):
    """A folder on a disk-backed file system: on tmpfs the page cache *is* the storage."""
    if not os.path.exists("/proc/mounts"):
        pytest.skip("no /proc/mounts: page-cache dropping is tested on Linux only")
    if _filesystem(tmp_path) not in _MEMORY_FILESYSTEMS:
        yield tmp_path
        return
    fallback = Path("/var/tmp")
    if fallback.is_dir() and _filesystem(fallback) not in _MEMORY_FILESYSTEMS:
        folder = fallback / f"pipeprof-test-{os.getpid()}-{tmp_path.name}"
        folder.mkdir()
        yield folder
        for p in folder.iterdir():
            p.unlink()
        folder.rmdir()
        return
    pytest.skip(f"{tmp_path} and /var/tmp are on a memory file system: pages cannot be dropped there")


def _write(path: Path, size_bytes: int = SIZE_BYTES) -> Path:
    chunk = os.urandom(1 << 20)
    with open(path, "wb") as f:
        for _ in range(size_bytes // len(chunk)):
            f.write(chunk)
        f.write(chunk[: size_bytes % len(chunk)])
    return path


def _read_all(path: Path) -> None:
    with open(path, "rb") as f:
        while f.read(8 << 20):
            pass


def _skip_if_the_kernel_keeps_pages(result) -> None:
    if not result.dropped:
        pytest.skip(f"the kernel did not drop the pages here, so nothing can be read cold: {result.reason}")


def test_a_read_file_is_resident(disk_dir):
    path = _write(disk_dir / "data.bin")
    _read_all(path)
    assert resident_bytes([path]) >= 0.95 * SIZE_BYTES
    assert resident_bytes([path]) <= SIZE_BYTES


def test_drop_evicts_even_a_file_written_moments_ago(disk_dir):
    # Freshly written pages are dirty, and POSIX_FADV_DONTNEED skips those
    # (measured here: 16-24 MiB of a fresh 64-256 MiB file stayed); drop()
    # flushes and advises again.
    path = _write(disk_dir / "data.bin")
    result = drop([path])
    assert result.files == 1 and result.bytes_total == SIZE_BYTES
    assert result.resident_before_bytes >= 0.95 * SIZE_BYTES
    assert result.dropped is True and result.reason is None
    assert result.resident_after_bytes <= RESIDENT_TOLERANCE_FRACTION * SIZE_BYTES
    assert resident_bytes([path]) <= RESIDENT_TOLERANCE_FRACTION * SIZE_BYTES


def test_reading_after_a_drop_hits_the_disk(disk_dir):
    path = _write(disk_dir / "data.bin")
    _read_all(path)
    result = drop([path])
    _skip_if_the_kernel_keeps_pages(result)
    me = psutil.Process()
    before = me.io_counters().read_bytes
    _read_all(path)
    cold_bytes = me.io_counters().read_bytes - before
    before = me.io_counters().read_bytes
    _read_all(path)
    warm_bytes = me.io_counters().read_bytes - before
    assert cold_bytes == pytest.approx(SIZE_BYTES, rel=DISK_READ_TOLERANCE)
    assert warm_bytes < DISK_READ_TOLERANCE * SIZE_BYTES  # the read above cached it again
    assert resident_bytes([path]) >= 0.95 * SIZE_BYTES


def test_a_live_memory_map_keeps_its_pages(disk_dir):
    # Measured on Linux 6.18: every page a live map has touched stays resident
    # after POSIX_FADV_DONTNEED; untouched pages of the same file are dropped.
    path = _write(disk_dir / "data.bin")
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        assert sum(m[i] for i in range(0, len(m), mmap.PAGESIZE)) >= 0  # touch every page
        result = drop([path])
        assert result.dropped is False
        assert result.resident_after_bytes >= 0.95 * SIZE_BYTES
        assert "memory map" in result.reason and "still in the page cache" in result.reason
    # Unmapped, the same file drops.
    assert drop([path]).dropped is True


def test_small_files_count_only_their_own_bytes(disk_dir):
    # 3136 bytes is less than a page: a resident file counts 3136, not 4096.
    paths = []
    for i in range(200):
        paths.append(disk_dir / f"{i:03d}.bin")
        paths[-1].write_bytes(os.urandom(3136))
    empty = disk_dir / "empty.bin"
    empty.touch()
    for p in paths:
        p.read_bytes()
    assert resident_bytes(paths + [empty]) == 200 * 3136
    result = drop(paths + [empty])
    assert result.files == 201 and result.bytes_total == 200 * 3136
    assert result.dropped is True
    assert resident_bytes(paths) <= RESIDENT_TOLERANCE_FRACTION * 200 * 3136


def test_no_files_is_nothing_to_drop():
    assert resident_bytes([]) == 0
    result = drop([])
    assert (result.files, result.bytes_total, result.dropped, result.reason) == (0, 0, True, None)


def test_a_missing_file_raises(tmp_path):
    with pytest.raises(FileNotFoundError):
        resident_bytes([tmp_path / "nope.bin"])
    with pytest.raises(FileNotFoundError):
        drop([tmp_path / "nope.bin"])


def test_without_posix_fadvise_nothing_is_dropped_and_it_says_why(disk_dir, monkeypatch):
    path = _write(disk_dir / "data.bin", 1 << 20)
    _read_all(path)
    monkeypatch.delattr(os, "posix_fadvise")
    result = drop([path])
    assert result.dropped is False
    assert "posix_fadvise is not available" in result.reason
    assert result.resident_after_bytes == 1 << 20


def test_without_mincore_the_drop_is_unverified_and_says_why(disk_dir, monkeypatch):
    path = _write(disk_dir / "data.bin", 1 << 20)
    monkeypatch.setattr(pagecache, "_libc", None)
    monkeypatch.setattr(pagecache, "_libc_absence", "the C library has no mincore/mmap: test")
    assert resident_bytes([path]) is None
    assert measure_resident([path]) == (None, "the C library has no mincore/mmap: test")
    result = drop([path])
    assert result.resident_before_bytes is None and result.resident_after_bytes is None
    assert result.dropped is True
    assert "not verified" in result.reason and "no mincore" in result.reason


def test_a_file_this_user_cannot_write_is_not_measured(disk_dir, monkeypatch):
    # Linux >= 5.0 makes mincore report every page resident for such a file
    # (checked by hand here: as uid 65534, a dropped root-owned 0644 file read
    # as 100% resident), so a number would be a lie.
    path = _write(disk_dir / "data.bin", 1 << 20)
    monkeypatch.setattr(os, "geteuid", lambda: 12345)
    monkeypatch.setattr(os, "access", lambda *a, **k: False)
    resident, why = measure_resident([path])
    assert resident is None
    assert "neither owns nor may write" in why


def test_drop_result_is_a_plain_dict():
    result = pagecache.DropResult(3, 300, 300, 0, True, None)
    assert result.to_dict() == {"files": 3, "bytes_total": 300, "resident_before_bytes": 300,
                                "resident_after_bytes": 0, "dropped": True, "reason": None}
