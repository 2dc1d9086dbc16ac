"""A plain HTTP server on 127.0.0.1 that serves the workload tarballs, in a background thread.

The operator fetches its sources from here exactly as from a release URL
(it needs ``KFDEF_ALLOW_INSECURE_HTTP=1`` for plain http).
"""

from __future__ import annotations

import functools
import http.server
import threading
from pathlib import Path


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base class's name)
        pass


class ArchiveServer:
    """Serves the files of ``directory``; use as a context manager."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        handler = functools.partial(_QuietHandler, directory=str(directory))
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="archive-server", daemon=True)

    def __enter__(self) -> ArchiveServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def url(self, file: Path) -> str:
        """The http URL of a file inside the served directory."""
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/{file.relative_to(self.directory).as_posix()}"
