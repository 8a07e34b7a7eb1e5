"""The shop API (stdlib only).

  GET /health            200 {"status": "ok"} when the database opens, else 503
  GET /total?user=NAME   200 {"user", "orders", "total_cents", "total"}

The logic lives in orders.py and is re-imported on every request, so an edit to it is
live at once (and a fresh start of the service serves it too).
"""
import importlib
import json
import os
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import orders  # noqa: E402

_reload_lock = threading.Lock()


def fresh_orders():
    with _reload_lock:
        return importlib.reload(orders)


class Handler(BaseHTTPRequestHandler):
    server_version = "shop/1.0"

    def send_json(self, status, body):
        data = (json.dumps(body) + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        url = urlparse(self.path)
        try:
            if url.path == "/health":
                ok = fresh_orders().ping()
                return self.send_json(200 if ok else 503, {"status": "ok" if ok else "db down"})
            if url.path == "/total":
                user = parse_qs(url.query).get("user", [""])[0]
                if not user:
                    return self.send_json(400, {"error": "missing ?user="})
                return self.send_json(200, fresh_orders().total(user))
            return self.send_json(404, {"error": "not found"})
        except Exception as exc:  # report, keep serving
            return self.send_json(500 if url.path != "/health" else 503,
                                  {"error": "%s: %s" % (type(exc).__name__, exc)})

    def log_message(self, fmt, *args):
        if not self.path.startswith("/health"):
            super().log_message(fmt, *args)


def main():
    port = int(os.environ.get("PORT", "8080"))
    server = ThreadingHTTPServer(("0.0.0.0", port), Handler)
    server.daemon_threads = True
    # PID 1 ignores SIGTERM unless it installs a handler: stop promptly.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print("shop API listening on :%d" % port, file=sys.stderr)
    server.serve_forever()


if __name__ == "__main__":
    main()
