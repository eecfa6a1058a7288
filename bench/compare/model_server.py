#!/usr/bin/env python3
"""Scripted OpenAI-compatible Chat Completions server for the side-by-side benchmark.

Loopback only, stdlib only, deterministic:
  - GET  /v1/models             -> one model, "stub-model" (max_model_len 64000)
  - POST /v1/chat/completions   -> if the conversation has no tool result after its last
    user message and tools are offered, call one tool (``get_weather`` when offered, else
    the first offered tool whose name does not start with ``eve``), else a short text reply.
    Streams SSE when ``stream`` is true (and a usage chunk when
    ``stream_options.include_usage`` is true); plain JSON otherwise.

Usage: model_server.py [--port N] [--port-file PATH]  (port 0 = pick a free one)
Every request is logged as one JSON line to stderr when --log is given.
"""
import argparse
import json
import os
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL = "stub-model"
COUNTER = {"n": 0}
LOCK = threading.Lock()


def next_id():
    with LOCK:
        COUNTER["n"] += 1
        return COUNTER["n"]


def choose_tool(tools):
    names = []
    for t in tools or []:
        fn = t.get("function") or {}
        if fn.get("name"):
            names.append(fn["name"])
    for n in names:
        if n == "get_weather" or n.endswith("get_weather"):
            return n, {"city": "Paris"}
    for n in names:
        if not n.startswith("eve") and n != "load_skill":
            return n, {}
    return None, None


def asks_for_text(message):
    """A user message with "(no tools)" in it gets a text reply even when tools are offered."""
    content = message.get("content")
    if isinstance(content, list):
        content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return isinstance(content, str) and "(no tools)" in content


def plan(body):
    """Return ("tool", name, args) or ("text", reply)."""
    msgs = body.get("messages") or []
    last_user = max((i for i, m in enumerate(msgs) if m.get("role") == "user"), default=-1)
    tool_after = any(m.get("role") == "tool" for m in msgs[last_user + 1:])
    tools = body.get("tools") or []
    if not tool_after and not asks_for_text(msgs[last_user] if last_user >= 0 else {}):
        name, args = choose_tool(tools)
        if name:
            return ("tool", name, args)
    last_role = msgs[-1].get("role") if msgs else "none"
    reply = f"stub reply: saw {len(msgs)} messages and {len(tools)} tools; last role={last_role}"
    return ("text", reply)


USAGE = {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "stub-model/1"
    log_requests = False

    def setup(self):
        super().setup()
        # Streamed chunks are small writes: without TCP_NODELAY, Nagle + the client's delayed
        # ACK add ~40 ms to every model call.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, fmt, *args):  # silence default access log
        pass

    def _json(self, status, obj):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        path = self.path.split("?")[0].rstrip("/")
        if path in ("/v1/models", "/models"):
            self._json(200, {"object": "list", "data": [{
                "id": MODEL, "object": "model", "created": 0, "owned_by": "bench",
                "max_model_len": 64000}]})
        elif path in ("/health", "/v1/health", ""):
            self._json(200, {"ok": True})
        else:
            self._json(404, {"error": {"message": "not found"}})

    def _read_body(self):
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        n = int(self.headers.get("content-length") or 0)
        return self.rfile.read(n) if n else b""

    def _chunk(self, data: bytes):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def do_POST(self):
        path = self.path.split("?")[0].rstrip("/")
        raw = self._read_body()
        if path not in ("/v1/chat/completions", "/chat/completions"):
            self._json(404, {"error": {"message": "not found"}})
            return
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._json(400, {"error": {"message": "bad json"}})
            return
        p = plan(body)
        n = next_id()
        cid = f"chatcmpl-{n}"
        created = int(time.time())
        if self.server.log:
            sys.stderr.write(json.dumps({"req": n, "messages": len(body.get("messages") or []),
                                         "tools": len(body.get("tools") or []),
                                         "tool_names": [(t.get("function") or {}).get("name")
                                                        for t in (body.get("tools") or [])][:12],
                                         "stream": bool(body.get("stream")), "plan": p[0]}) + "\n")
        if not body.get("stream"):
            if p[0] == "tool":
                msg = {"role": "assistant", "content": None, "tool_calls": [{
                    "id": f"call_{n}", "type": "function",
                    "function": {"name": p[1], "arguments": json.dumps(p[2])}}]}
                finish = "tool_calls"
            else:
                msg = {"role": "assistant", "content": p[1]}
                finish = "stop"
            self._json(200, {"id": cid, "object": "chat.completion", "created": created,
                             "model": MODEL, "choices": [{"index": 0, "message": msg,
                                                          "finish_reason": finish}],
                             "usage": USAGE})
            return
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()

        def ev(delta, finish=None, usage=None, choices=True):
            obj = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": MODEL,
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish}] if choices else []}
            if usage is not None:
                obj["usage"] = usage
            self._chunk(b"data: " + json.dumps(obj).encode() + b"\n\n")

        ev({"role": "assistant", "content": ""})
        if p[0] == "tool":
            args = json.dumps(p[2])
            ev({"tool_calls": [{"index": 0, "id": f"call_{n}", "type": "function",
                                "function": {"name": p[1], "arguments": ""}}]})
            ev({"tool_calls": [{"index": 0, "function": {"arguments": args}}]})
            ev({}, finish="tool_calls")
        else:
            words = p[1].split(" ")
            for i, w in enumerate(words):
                ev({"content": w + (" " if i < len(words) - 1 else "")})
            ev({}, finish="stop")
        if include_usage:
            ev(None, usage=USAGE, choices=False)
        self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")
        self.wfile.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file")
    ap.add_argument("--log", action="store_true")
    a = ap.parse_args()
    srv = ThreadingHTTPServer((a.host, a.port), Handler)
    srv.daemon_threads = True
    srv.log = a.log
    port = srv.server_address[1]
    if a.port_file:
        with open(a.port_file + ".tmp", "w") as f:
            f.write(str(port))
        os.replace(a.port_file + ".tmp", a.port_file)
    sys.stderr.write(f"stub model on http://{a.host}:{port}/v1\n")
    sys.stderr.flush()
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
