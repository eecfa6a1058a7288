#!/usr/bin/env python3
"""The idle-stream holder of bench/serve.py: one process, one thread, raw non-blocking sockets and
`selectors`, so that holding 10,000 follow streams costs the shared cores as little as a client can.

    python3 bench/serve_hold.py --port P --rate R < `SESSION_ID NEXT_INDEX` lines, then an empty line

For each session it opens `GET /eve/v1/session/:id/stream` (NDJSON, following) and keeps it open
as a connected UI does: the server ends a follow once the session comes to rest, and the holder
reopens it at the next index (counted from the events it read), so every session holds an open
stream all the time. `--rate` turns per second of background traffic (`POST /eve/v1/session/:id`)
go to random sessions. Opening is paced (`--opening` connections in flight) so the kernel's accept
queue never overflows while the streams are set up; the measurement starts after every stream has
its response headers.

Lines on stdout: `open N SECONDS` once all N streams have their headers (the background traffic
starts when `go` comes on stdin), and after `stop` on stdin, one JSON object: the holder's CPU (user, system) and wall time since the streams opened,
background turns sent and answered, stream reopens, and errors.
"""

import argparse
import errno
import json
import os
import random
import resource
import selectors
import socket
import sys
import time

# One per event in eve's envelope (`"meta":{"at":…}`), never split by the counting below because a
# short tail of each read is kept.
EVENT = b'"meta":{"at":"'
WAITING = b'"type":"session.waiting"'


class Stream:
    __slots__ = ("sid", "next", "sock", "out", "head", "tail", "seen", "opened")

    def __init__(self, line):
        sid, _, start = line.partition(" ")
        self.sid = sid
        self.next = int(start or 0)
        self.sock = None
        self.out = b""
        self.head = True
        self.tail = b""
        self.seen = 0
        self.opened = False


class Post:
    __slots__ = ("sock", "out", "raw")

    def __init__(self):
        self.sock = None
        self.out = b""
        self.raw = b""


class Holder:
    def __init__(self, port, sessions, rate, opening):
        self.port = port
        self.streams = [Stream(s) for s in sessions]
        self.rate = rate
        self.opening = opening
        self.sel = selectors.DefaultSelector()
        self.pending = list(self.streams)  # streams waiting for a connect slot
        self.connecting = 0
        self.open_count = 0
        self.all_open_at = None
        self.reopens = 0
        self.errors = 0
        self.sent = 0
        self.answered = 0
        self.stopping = False
        self.going = False
        self.cpu0 = None
        self.wall0 = None

    # ---- sockets ----
    def connect(self, obj, request):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        rc = s.connect_ex(("127.0.0.1", self.port))
        if rc not in (0, errno.EINPROGRESS):
            s.close()
            raise OSError(rc, os.strerror(rc))
        obj.sock = s
        obj.out = request
        self.sel.register(s, selectors.EVENT_WRITE, obj)

    def open_stream(self, st):
        st.head, st.tail, st.seen, st.opened = True, b"", 0, False
        req = (f"GET /eve/v1/session/{st.sid}/stream?startIndex={st.next} HTTP/1.1\r\n"
               f"Host: 127.0.0.1:{self.port}\r\nConnection: close\r\n\r\n").encode()
        self.connecting += 1
        self.connect(st, req)

    def close(self, obj):
        try:
            self.sel.unregister(obj.sock)
        except (KeyError, ValueError):
            pass
        obj.sock.close()
        obj.sock = None

    def post(self):
        sid = random.choice(self.streams).sid
        body = b'{"message":"tick"}'
        req = (f"POST /eve/v1/session/{sid} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n"
               f"Connection: close\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\n\r\n").encode() + body
        p = Post()
        try:
            self.connect(p, req)
            self.sent += 1
        except OSError:
            self.errors += 1

    def fill(self):
        while self.pending and self.connecting < self.opening:
            st = self.pending.pop()
            try:
                self.open_stream(st)
            except OSError:
                self.errors += 1
                self.pending.insert(0, st)
                break

    def writable(self, obj):
        try:
            n = obj.sock.send(obj.out)
        except BlockingIOError:
            return
        except OSError:
            self.failed(obj)
            return
        obj.out = obj.out[n:]
        if not obj.out:
            self.sel.modify(obj.sock, selectors.EVENT_READ, obj)

    def failed(self, obj):
        self.errors += 1
        self.close(obj)
        if isinstance(obj, Stream):
            if obj.opened:
                self.open_count -= 1
            else:
                self.connecting -= 1
            if not self.stopping:
                self.pending.append(obj)

    def readable(self, obj):
        try:
            data = obj.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            self.failed(obj)
            return
        if isinstance(obj, Post):
            if data:
                obj.raw += data
                return
            if obj.raw.startswith(b"HTTP/1.1 2"):
                self.answered += 1
            else:
                self.errors += 1
            self.close(obj)
            return
        st = obj
        if not data:
            # The server ended the follow (the session came to rest): reopen at the next index.
            self.reopen(st)
            return
        if st.head:
            buf = st.tail + data
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                st.tail = buf[-4096:]
                return
            if not buf.startswith(b"HTTP/1.1 200"):
                self.errors += 1
            st.head = False
            st.opened = True
            self.connecting -= 1
            self.open_count += 1
            if self.open_count == len(self.streams) and self.all_open_at is None:
                self.all_open_at = time.perf_counter()
            data = buf[end + 4:]
            st.tail = b""
        buf = st.tail + data
        # Count events whose marker lies wholly in this buffer and not in the kept tail.
        n = buf.count(EVENT) - st.tail.count(EVENT)
        st.next += n
        st.seen += n
        waiting = WAITING in buf and WAITING not in st.tail
        st.tail = buf[-64:]
        if waiting:
            self.reopen(st)

    def reopen(self, st):
        if st.opened:
            self.open_count -= 1
        else:
            self.connecting -= 1
        self.close(st)
        self.reopens += 1
        if not self.stopping:
            self.pending.append(st)

    def stdin_line(self):
        line = sys.stdin.readline()
        if not line or line.strip() == "stop":
            self.stopping = True
        elif line.strip() == "go":
            self.going = True

    def run(self):
        self.sel.register(sys.stdin, selectors.EVENT_READ, None)
        t_start = time.perf_counter()
        interval = 1.0 / self.rate if self.rate > 0 else None
        nxt = None
        announced = False
        while not self.stopping:
            self.fill()
            timeout = 0.5
            now = time.perf_counter()
            if self.going and interval is not None:
                if nxt is None:
                    nxt = now
                if now >= nxt:
                    self.post()
                    nxt += interval
                    # A late loop sends the missed turns one by one, never a burst of all.
                    nxt = max(nxt, now - interval)
                timeout = max(0.0, nxt - time.perf_counter())
            for key, mask in self.sel.select(timeout):
                if key.data is None:
                    self.stdin_line()
                elif mask & selectors.EVENT_WRITE:
                    self.writable(key.data)
                else:
                    self.readable(key.data)
            if not announced and self.all_open_at is not None:
                announced = True
                self.cpu0 = resource.getrusage(resource.RUSAGE_SELF)
                self.wall0 = time.perf_counter()
                print(f"open {len(self.streams)} {self.all_open_at - t_start:.3f}", flush=True)
        ru = resource.getrusage(resource.RUSAGE_SELF)
        wall = time.perf_counter() - (self.wall0 or t_start)
        cpu0 = self.cpu0 or ru
        print(json.dumps({
            "wall_s": wall,
            "cpu_user_s": ru.ru_utime - cpu0.ru_utime,
            "cpu_sys_s": ru.ru_stime - cpu0.ru_stime,
            "open": self.open_count,
            "background_sent": self.sent,
            "background_answered": self.answered,
            "reopens": self.reopens,
            "errors": self.errors,
        }), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--rate", type=float, default=20.0)
    ap.add_argument("--opening", type=int, default=256,
                    help="stream connections being opened at once")
    a = ap.parse_args()
    sessions = []
    while True:
        line = sys.stdin.readline().strip()
        if not line:
            break
        sessions.append(line)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    Holder(a.port, sessions, a.rate, a.opening).run()


if __name__ == "__main__":
    main()
