"""A rich progress bar (transfers) or status line (waits) on stderr, implementing core.transfer.Progress."""

from __future__ import annotations

import threading

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn
from rich.status import Status

from sparkpoint.cli.rich_text import text
from sparkpoint.results import literal


class RichProgress:
    def __init__(self) -> None:
        self._progress: Progress | None = None
        self._task = None
        self._status: Status | None = None
        self._lock = threading.Lock()  # transfers advance from several worker threads

    def waiting(self, message: str) -> None:
        if self._status is None:
            self._status = Status(text(message), console=Console(stderr=True))
            self._status.start()
        else:
            self._status.update(text(message))

    def start(self, description: str, total_bytes: int) -> None:
        self._progress = Progress(
            TextColumn("{task.description}", markup=False),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        self._progress.start()
        self._task = self._progress.add_task(literal(description), total=total_bytes)

    def advance(self, nbytes: int) -> None:
        with self._lock:
            if self._progress is not None:
                self._progress.advance(self._task, nbytes)

    def finish(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
