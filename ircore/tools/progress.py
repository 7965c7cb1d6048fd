"""A one-line progress bar on stderr, for commands that take more than a few seconds.

Drawn only where someone watches: when stderr is a terminal and the output is not ``--json``
(pipes, logs and CI get nothing but the result).
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

_WIDTH = 24
_REDRAW_S = 0.1


class Progress:
    """``verify [#########-----------]  120/396  vllm_c.rms_norm``, rewritten in place."""

    def __init__(self, total: int, title: str, *, enabled: bool | None = None, stream: TextIO | None = None):
        self.total, self.title, self.done = max(total, 0), title, 0
        self.stream = sys.stderr if stream is None else stream
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self._drawn_at = 0.0
        self._width = 0

    def advance(self, note: str = "") -> None:
        """One more step done; ``note`` says what runs now."""
        self.done += 1
        now = time.monotonic()
        if self.enabled and (now - self._drawn_at >= _REDRAW_S or self.done >= self.total):
            self._drawn_at = now
            self._draw(note)

    def _draw(self, note: str) -> None:
        filled = _WIDTH * self.done // self.total if self.total else _WIDTH
        line = f"{self.title} [{'#' * filled}{'-' * (_WIDTH - filled)}] {self.done}/{self.total}  {note}"
        self.stream.write("\r" + line.ljust(self._width))
        self.stream.flush()
        self._width = len(line)

    def close(self) -> None:
        """Clear the bar, so that what follows starts on a clean line."""
        if self.enabled and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
