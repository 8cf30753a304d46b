"""A proxy in front of the S3 server that fails on purpose: every ``throttle_every``-th PUT is
answered 503 SlowDown (what S3 says when it throttles), and ``stop()`` / ``start()`` take the
endpoint away and bring it back on the same port (a server that went down mid-run). It forwards
requests unchanged (the Host header too, so request signatures still match).

``conditions``: how a refused conditional PUT (``If-None-Match`` / ``If-Match``) is answered, as
the S3 servers a facility runs answer it: "aws" (412 PreconditionFailed with a Condition element),
"minio" (412 without one), "ceph" (412, Ceph RGW's message, no Condition), "conflict" (409
ConditionalRequestConflict, AWS's answer to a concurrent conditional write); None passes the
server's own answer through.

``put_delay``: seconds each PUT waits before it is forwarded (uploads still in flight when a unit
returns would be missed); ``refuse_puts``: PUTs whose path holds this text are answered 403
AccessDenied (never retried), a write that fails."""
from __future__ import annotations

import http.client
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SLOW_DOWN = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
             b"<Message>Please reduce your request rate.</Message></Error>")
ACCESS_DENIED = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code>'
                 b"<Message>Access Denied</Message></Error>")


CONDITION_ANSWERS = {
    "aws": (412, b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>PreconditionFailed</Code><Message>At least one '
                 b'of the pre-conditions you specified did not hold</Message><Condition>If-None-Match</Condition>'
                 b'</Error>'),
    "minio": (412, b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>PreconditionFailed</Code><Message>At least one '
                   b'of the pre-conditions you specified did not hold</Message><Key>k</Key><BucketName>b</BucketName>'
                   b'<Resource>/b/k</Resource></Error>'),
    "ceph": (412, b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>PreconditionFailed</Code><BucketName>b'
                  b'</BucketName><RequestId>tx0</RequestId><HostId>rgw</HostId></Error>'),
    "conflict": (409, b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>ConditionalRequestConflict</Code><Message>'
                      b'A conflicting conditional operation is currently in progress against this resource.'
                      b'</Message></Error>'),
}


class FaultyProxy:
    def __init__(self, upstream_port: int, port: int, throttle_every: int = 0, conditions: str | None = None,
                 put_delay: float = 0.0, refuse_puts: str | None = None):
        self.upstream_port, self.port, self.throttle_every = upstream_port, port, throttle_every
        self.conditions, self.put_delay, self.refuse_puts = conditions, put_delay, refuse_puts
        self.puts = self.throttled = self.conditions_refused = 0
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._open: set = set()  # client connections being served (keep-alive): cut on stop()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "FaultyProxy":
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                proxy._open.add(self.connection)

            def finish(self) -> None:
                proxy._open.discard(self.connection)
                super().finish()

            def _error(self, status: int, data: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _forward(self) -> None:
                body = self._body()
                if self.command == "PUT" and proxy.put_delay:
                    time.sleep(proxy.put_delay)
                if self.command == "PUT" and proxy.refuse_puts and proxy.refuse_puts in self.path:
                    return self._error(403, ACCESS_DENIED)
                if self.command == "PUT" and proxy.throttle_every:
                    with proxy._lock:
                        proxy.puts += 1
                        refuse = proxy.puts % proxy.throttle_every == 0
                        proxy.throttled += refuse
                    if refuse:
                        return self._error(503, SLOW_DOWN)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("transfer-encoding", "expect")}
                if body is not None:
                    headers["Content-Length"] = str(len(body))
                conn = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=60)
                conn.request(self.command, self.path, body=body, headers=headers)
                answer = conn.getresponse()
                data = answer.read()
                conditional = self.command == "PUT" and (self.headers.get("If-None-Match") or self.headers.get("If-Match"))
                if conditional and proxy.conditions and answer.status in (409, 412):
                    status, data = CONDITION_ANSWERS[proxy.conditions]
                    with proxy._lock:
                        proxy.conditions_refused += 1
                    self._error(status, data)
                    conn.close()
                    return
                self.send_response(answer.status)
                for key, value in answer.getheaders():
                    if key.lower() not in ("content-length", "transfer-encoding", "connection"):
                        self.send_header(key, value)
                # a HEAD answer has no body but the object's length
                self.send_header("Content-Length", answer.getheader("Content-Length", "0") if self.command == "HEAD"
                                 else str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                conn.close()

            def _body(self) -> bytes | None:
                """The request body, HTTP chunked framing removed (botocore streams some bodies chunked;
                S3's own aws-chunked framing inside is left for the server)."""
                if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
                    out = bytearray()
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            return bytes(out)
                        out += self.rfile.read(size)
                        self.rfile.readline()
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(length) if length else None

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        """Gone: no new connections, and the open ones cut (a client's pool would keep using them)."""
        import socket

        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        for conn in list(self._open):
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
