"""The demo's log file, and log records turned into events of the live view.

While the demo runs, every log record (INFO and up) goes to the run's log file, never to the
terminal, where lines would tear the live view apart; the JVM writes its output to the same
file (rabbitry.spark.startup). Records at WARNING and up (the failover's "master unavailable",
"promoting ...") also become short events in the view, so the viewer sees them happen; the
full lines stay in the file. The logging set-up of the process is restored on exit.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

EVENT_WIDTH = 90  # characters of a log line shown as a view event


class _EventHandler(logging.Handler):
    def __init__(self, emit: Callable[[str], None]) -> None:
        super().__init__(logging.WARNING)
        self._emit = emit

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage().splitlines()[0] if record.getMessage() else ""
            who = record.name.rsplit(".", 1)[-1]
            line = f"{record.levelname.lower()} {who}: {text}"
            if len(line) > EVENT_WIDTH:
                line = line[: EVENT_WIDTH - 1] + "…"
            self._emit(line)
        except Exception:  # a view event is a nicety; the file has the record
            self.handleError(record)


class DemoLog:
    """`with DemoLog(path, on_warning):` routes logging to `path` and warnings to the view."""

    def __init__(self, path: Path, on_warning: Callable[[str], None]) -> None:
        self.path = Path(path)
        self._on_warning = on_warning
        self._saved: tuple[list[logging.Handler], int] | None = None
        self._handlers: list[logging.Handler] = []

    def __enter__(self) -> DemoLog:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("")  # this run's log, not the last one's
        root = logging.getLogger()
        self._saved = (list(root.handlers), root.level)
        for handler in list(root.handlers):
            root.removeHandler(handler)
        to_file = logging.FileHandler(self.path)
        to_file.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        self._handlers = [to_file, _EventHandler(self._on_warning)]
        for handler in self._handlers:
            root.addHandler(handler)
        root.setLevel(min(root.level, logging.INFO) if root.level else logging.INFO)
        logging.getLogger("py4j").setLevel(logging.WARNING)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        root = logging.getLogger()
        for handler in self._handlers:
            root.removeHandler(handler)
            handler.close()
        if self._saved is not None:
            handlers, level = self._saved
            for handler in handlers:
                root.addHandler(handler)
            root.setLevel(level)

    def tail(self, lines: int = 20) -> list[str]:
        """The last lines of the log (what to show when the run fails)."""
        try:
            return self.path.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return []
