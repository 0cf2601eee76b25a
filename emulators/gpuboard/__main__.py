"""Entry point: ``python3 -m emulators.gpuboard``."""

from __future__ import annotations

import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

UUID = "GPU-00000000-emul-0000-0000-000000000000"
BASE_MIB = 600  # what a driver context holds on an idle GPU


class Board:
    def __init__(self, uuid: str, total_mib: int) -> None:
        self.uuid, self.total_mib = uuid, total_mib
        self.held: dict[str, int] = {}
        self.lock = threading.Lock()

    def metrics(self) -> str:
        with self.lock:
            used = min(self.total_mib, BASE_MIB + sum(self.held.values()))
            busy = 90.0 if any(self.held.values()) else 0.0
        labels = f'gpu="0",UUID="{self.uuid}",device="nvidia0",modelName="Emulated GPU"'
        return "".join(f"# TYPE {name} gauge\n{name}{{{labels}}} {value}\n" for name, value in (
            ("DCGM_FI_DEV_FB_USED", used), ("DCGM_FI_DEV_FB_FREE", self.total_mib - used),
            ("DCGM_FI_DEV_FB_RESERVED", 0), ("DCGM_FI_DEV_GPU_UTIL", busy)))


def handler(board: Board) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            return

        def _answer(self, status: int, body: str, kind: str = "text/plain") -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("content-type", kind)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/metrics":
                self._answer(200, board.metrics(), "text/plain; version=0.0.4")
            else:
                self._answer(404, "not found\n")

        def do_POST(self) -> None:
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
                owner = str(body["owner"])
                mib = int(body["mib"] if self.path == "/alloc" else body.get("keep_mib", 0))
            except (ValueError, KeyError, TypeError):
                self._answer(422, "expected {owner, mib} or {owner, keep_mib}\n")
                return
            if self.path not in ("/alloc", "/free"):
                self._answer(404, "not found\n")
                return
            with board.lock:
                board.held[owner] = max(0, mib)
            self._answer(200, board.metrics())
    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(prog="python3 -m emulators.gpuboard")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--uuid", default=UUID)
    parser.add_argument("--total-mib", type=int, default=81559)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), handler(Board(args.uuid,
                                                                         args.total_mib)))
    print(f"listening on http://127.0.0.1:{server.server_port}", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
