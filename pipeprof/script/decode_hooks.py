"""The decode calls inside ``__getitem__`` (issue 18, item 2): PIL, torchvision.io and numpy reads, timed per batch.

Part of the hooks of a profiled script; standard library only at import
(the libraries it patches are the script's own, patched only once the
script has imported them). While a timed fetch runs in this process
(``FETCH.on``, set by ``pipeprof.script.batches``), the outermost call of
each function in ``DECODE_CALLS`` is timed (wall and thread CPU) and added
to this process's totals under its name; a call inside another timed call
(``convert`` calls ``load``; ``read_image`` calls ``read_file`` and
``decode_image``) or inside a timed transform (``measure.timed_depth.DEPTH``:
its time is the transform's) is not timed again. ``take()`` gives and
clears the totals, one batch's worth.

Rows are named per function, as the user's code calls it:
``PIL.Image.open`` (for a file, it reads the header; the pixels are decoded
later, in ``load``, which ``convert`` calls), ``PIL.Image.convert``,
``PIL.Image.load`` (a format's own ``load``, WebP's or TIFF's, as well),
``torchvision.io.decode_image`` / ``decode_jpeg`` / ``decode_png`` /
``read_file`` / ``read_image``, ``numpy.load``, ``cv2.imread`` / ``cv2.imdecode``. A function
reached through another name bound before the patch (``from torchvision.io
import decode_jpeg`` at import time) is not seen.

Outside a timed fetch a patched call costs one attribute read more.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from pipeprof.measure.timed_depth import DEPTH
from pipeprof.script.patches import Patches, wraps

clock = time.perf_counter
cpu_clock = time.thread_time

# (module, owner path inside it, attribute, row name); the owner "" is the module itself. torchvision.io
# re-exports torchvision.io.image's functions: both names are patched, with one wrapper.
DECODE_CALLS = (
    ("PIL.Image", "", "open", "PIL.Image.open"),
    ("PIL.Image", "Image", "convert", "PIL.Image.convert"),
    ("PIL.Image", "Image", "load", "PIL.Image.load"),
    ("PIL.ImageFile", "ImageFile", "load", "PIL.Image.load"),  # what a file's image (PNG, JPEG) loads with
    *((module, "", name, f"torchvision.io.{name}") for name in
      ("decode_image", "decode_jpeg", "decode_png", "read_file", "read_image")
      for module in ("torchvision.io.image", "torchvision.io")),
    ("numpy", "", "load", "numpy.load"),
    ("cv2", "", "imread", "cv2.imread"),  # OpenCV reads and decodes a file in one call
    ("cv2", "", "imdecode", "cv2.imdecode"),
)
# A file format's image class with a ``load`` of its own (Pillow's WebP, TIFF, AVIF, JPEG 2000...: it decodes
# there, then calls ``ImageFile.load``): every subclass of this one defining ``load`` is timed as PIL.Image.load
IMAGE_CLASS = ("PIL.Image", "Image", "load", "PIL.Image.load")


class _Fetch:
    """Whether a timed fetch is running in this process (the decode calls are timed only then)."""

    __slots__ = ("on",)

    def __init__(self) -> None:
        self.on = False


FETCH = _Fetch()
_TOTALS: dict[str, list[Any]] = {}  # per process: name -> [calls, wall_s, cpu_s] since the last take()


def begin() -> None:
    """A timed fetch begins: decode calls count from here (a depth left by a failed call is reset)."""
    FETCH.on = True
    DEPTH.n = 0


def end() -> None:
    FETCH.on = False


def take() -> list[tuple[str, int, float, float]]:
    """``(name, calls, wall_s, cpu_s)`` of the decode calls timed since the last call, then cleared."""
    if not _TOTALS:
        return []
    out = [(name, t[0], t[1], t[2]) for name, t in _TOTALS.items()]
    _TOTALS.clear()
    return out


def _timed(original: Callable, name: str) -> Callable:
    def call(*args: Any, **kwargs: Any) -> Any:
        depth = DEPTH
        if not FETCH.on or depth.n:
            return original(*args, **kwargs)
        depth.n += 1
        t0, c0 = clock(), cpu_clock()
        try:
            return original(*args, **kwargs)
        finally:
            wall_s, cpu_s = clock() - t0, cpu_clock() - c0
            depth.n -= 1
            totals = _TOTALS.get(name)
            if totals is None:
                _TOTALS[name] = [1, wall_s, cpu_s]
            else:
                totals[0] += 1
                totals[1] += wall_s
                totals[2] += cpu_s
    call._pipeprof_decode = True  # type: ignore[attr-defined]
    return wraps(call, original)


def _same(wrapper: Callable) -> Callable[[Any], Callable]:
    def make(_original: Any) -> Callable:
        return wrapper
    return make


def install(patches: Patches) -> list[str]:
    """Patch the decode calls of the libraries this process has imported, where not patched yet (a later call
    patches those imported since); returns the names patched now."""
    done: list[str] = []
    wrappers: dict[int, Callable] = {}  # id(original) -> its wrapper: one per function, under every name
    for owner, attr, name in targets():
        original = getattr(owner, attr)
        if getattr(original, "_pipeprof_decode", False):
            continue  # patched already
        wrapper = wrappers.setdefault(id(original), _timed(original, name))
        patches.apply(owner, attr, _same(wrapper))
        done.append(f"{name} ({getattr(owner, '__name__', owner)}.{attr})")
    return done


def targets() -> list[tuple[Any, str, str]]:
    """``(owner, attribute, row name)`` of each decode call this process has imported, where it is defined
    (not inherited)."""
    out: list[tuple[Any, str, str]] = []
    for module_name, owner_path, attr, name in DECODE_CALLS:
        owner = sys.modules.get(module_name)
        for part in filter(None, owner_path.split(".")):
            owner = getattr(owner, part, None)
        if owner is not None and attr in vars(owner):
            out.append((owner, attr, name))
    module_name, owner_name, attr, name = IMAGE_CLASS
    module = sys.modules.get(module_name)
    base = getattr(module, owner_name, None)
    if isinstance(base, type):
        _load_formats(module)
        found = {id(owner) for owner, _, _ in out}
        out.extend((c, attr, name) for c in _subclasses(base) if attr in vars(c) and id(c) not in found)
    return out


def _load_formats(module: Any) -> None:
    """Import every file format's plugin now, as the first ``Image.open`` of a rarer format would (``init``):
    their classes exist to be patched before a worker forks (Pillow's own first call, not the script's)."""
    init = getattr(module, "init", None)
    if callable(init):
        init()  # Pillow's own: a plugin that fails to import is left out there


def _subclasses(cls: type) -> list[type]:
    """Every subclass of ``cls`` defined so far (a format's plugin imported later is patched at the next call)."""
    out: list[type] = []
    todo: list[type] = list(cls.__subclasses__())
    while todo:
        c = todo.pop()
        if c not in out:
            out.append(c)
            todo.extend(c.__subclasses__())
    return out
