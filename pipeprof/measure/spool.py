"""Rows that stream to disk: a long run's records in bounded memory.

A profiled hour at default rates is about half a million steps, as many
loading records and 36,000 sampler ticks; kept as Python dicts they would
cost the profiler hundreds of MB. A ``Spool`` keeps at most ``chunk_rows``
rows in memory and appends the rest to a CSV file in its folder, written
with the standard ``csv`` module (floats as ``repr``: they read back
exactly; NaN and None as an empty cell, which pandas reads as NaN).
``frame()`` reads everything back as one DataFrame when the run is over.

Without a folder a spool keeps every row in memory (short runs, tests).
A file that cannot be written (a full disk) is cut back to its last whole
row and the spool keeps the rest in memory (``lost`` says why): the run
goes on and no row is lost while the process lives.
"""

from __future__ import annotations

import contextlib
import csv
import io
import math
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any, cast

import pandas as pd

CHUNK_ROWS = 4096


class Spool:
    """Append rows (dicts); ``frame()`` gives them all back. ``columns`` None: the first row's keys."""

    def __init__(self, columns: list[str] | None = None, folder: Path | None = None, name: str = "rows",
                 chunk_rows: int = CHUNK_ROWS) -> None:
        self.columns = list(columns) if columns is not None else None
        self.chunk_rows = chunk_rows
        self.path: Path | None = None
        if folder is not None:
            fd, path = tempfile.mkstemp(dir=folder, prefix=f"{name}.", suffix=".csv")
            os.close(fd)
            self.path = Path(path)
        self._rows: list[dict[str, Any]] = []
        self._written = 0
        self.lost: str | None = None  # why the file stopped taking rows (they stay in memory since)

    def __len__(self) -> int:
        return self._written + len(self._rows)

    def append(self, row: dict[str, Any]) -> None:
        if self.columns is None:
            self.columns = list(row)
        self._rows.append(row)
        if self.path is not None and len(self._rows) >= self.chunk_rows:
            self.flush()

    def recent(self, n: int) -> list[dict[str, Any]]:
        """The last ``n`` rows still held in memory (with a folder, at most the unwritten chunk): cheap, for views
        of the last seconds while the rows stream on."""
        return list(self._rows[-n:]) if n > 0 else []

    def extend(self, rows: Iterable[dict[str, Any]]) -> None:
        for row in rows:
            self.append(row)

    def flush(self) -> None:
        """Write the rows held in memory to the file (no-op without a folder, or once it could not be written)."""
        if self.path is None or not self._rows or self.lost is not None:
            return
        columns = self.columns
        assert columns is not None  # the first append() set them
        size = self.path.stat().st_size if self._written else 0
        try:
            with open(self.path, "a", newline="", encoding="utf-8") as f:
                writer = csv.writer(f)
                if self._written == 0:
                    writer.writerow(columns)
                writer.writerows([_cell(row.get(c)) for c in columns] for row in self._rows)
        except OSError as e:  # a full disk: the file keeps its whole rows, memory the rest
            self.lost = e.strerror or str(e)
            with contextlib.suppress(OSError):
                os.truncate(self.path, size)
            return
        self._written += len(self._rows)
        self._rows = []

    def frame(self) -> pd.DataFrame:
        """All rows, in order, with ``columns`` (an empty frame with them when there are none)."""
        columns = self.columns or []
        parts = []
        if self.path is not None and self._written:
            parts.append(pd.read_csv(self.path))
        if self._rows:
            parts.append(pd.DataFrame(self._rows, columns=columns))
        if not parts:
            return pd.DataFrame(columns=columns)
        frame = parts[0] if len(parts) == 1 else pd.concat(parts, ignore_index=True)
        return frame.reindex(columns=columns)

    def rows(self) -> list[dict[str, Any]]:
        """All rows as dicts (NaN for empty cells); for tests and small runs."""
        if not self._written:
            return list(self._rows)  # exactly as appended
        # The frame's labels are ``columns`` (str); pandas' stubs type record keys as any Hashable.
        return cast("list[dict[str, Any]]", self.frame().to_dict("records"))

    def close(self) -> None:
        """Remove the file (the rows are gone after this)."""
        if self.path is not None:
            self.path.unlink(missing_ok=True)
        self._rows, self._written = [], 0


def spooled(folder: Path, name: str) -> pd.DataFrame | None:
    """The rows a spool named ``name`` wrote in ``folder`` (read back after its process ended, e.g. killed);
    None when it wrote none. Its last row is dropped when cut short (a process killed mid-write)."""
    paths = sorted(folder.glob(f"{name}.*.csv"))
    if not paths or paths[0].stat().st_size == 0:
        return None
    text = paths[0].read_text(encoding="utf-8")
    if not text.endswith("\n"):  # cut mid-row
        text = text[: text.rfind("\n") + 1]
    if not text:
        return None
    return pd.read_csv(io.StringIO(text))


def _cell(value: Any) -> Any:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return repr(value)
    return value
