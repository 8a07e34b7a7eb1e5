"""An MCP server over streamable HTTP (JSON-RPC 2.0 answers as application/json), one tool."""

import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ORDERS = {"4242": "TRK-7F3A-0042"}
TOOL = {
    "name": "lookup_order",
    "description": "The tracking code of an order.",
    "inputSchema": {
        "type": "object",
        "properties": {"order": {"type": "string"}},
        "required": ["order"],
    },
}


def answer(method, params):
    if method == "initialize":
        return {
            "protocolVersion": params.get("protocolVersion", "2025-03-26"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "orders", "version": "1.0"},
        }
    if method == "tools/list":
        return {"tools": [TOOL]}
    if method == "tools/call" and params.get("name") == "lookup_order":
        order = str((params.get("arguments") or {}).get("order", ""))
        code = ORDERS.get(order)
        text = code if code else f"no order {order}"
        return {"content": [{"type": "text", "text": text}], "isError": code is None}
    raise KeyError(method)


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def do_POST(self):
        if self.path != "/mcp":
            self.send_response(404)
            self.end_headers()
            return
        request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if "id" not in request:  # a notification
            self.send_response(202)
            self.end_headers()
            return
        try:
            body = {"jsonrpc": "2.0", "id": request["id"], "result": answer(request.get("method"), request.get("params") or {})}
        except KeyError:
            body = {"jsonrpc": "2.0", "id": request["id"], "error": {"code": -32601, "message": "method not found"}}
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


ThreadingHTTPServer(("0.0.0.0", 8000), Handler).serve_forever()
