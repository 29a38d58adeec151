"""An HTTP tool endpoint on 127.0.0.1 that counts the calls it receives (side effects), with
an optional delay so a test can kill the operator while a call is in flight."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class CountingTool:
    def __init__(self, delay: float = 0.0, reply: dict[str, Any] | None = None) -> None:
        self.delay = delay
        self.reply = reply or {"ok": True}
        self.calls: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                with outer._lock:
                    outer.calls.append(
                        {"path": self.path, "body": body, "headers": dict(self.headers)}
                    )
                if outer.delay:
                    time.sleep(outer.delay)
                payload = json.dumps(outer.reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *_: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/tool"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def count(self) -> int:
        with self._lock:
            return len(self.calls)

    def __enter__(self) -> CountingTool:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()
