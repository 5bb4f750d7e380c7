"""A tiny process for the server-lifecycle tests (not an engine stand-in: it only exercises
process groups, readiness polling and teardown). Modes: healthy, crash, hang, stubborn, keyed
(/v1/models answers 200 only with the key in $LIFECYCLE_KEY, 401 otherwise)."""

import http.server
import os
import signal
import socketserver
import subprocess
import sys
import time

# where to listen: a port, or a Unix socket's path (the harness's vLLM servers listen on one)
mode, where, pid_file = sys.argv[1], sys.argv[2], sys.argv[3]
# A grandchild in the same process group, like vLLM's engine-core process.
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
with open(pid_file, "w") as handle:
    handle.write(f"{os.getpid()} {child.pid}\n")
print(f"started mode={mode}", flush=True)
if mode == "crash":
    print("fatal: pretend the model failed to load", flush=True)
    sys.exit(7)
if mode == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if mode == "hang":
    time.sleep(600)


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if mode == "keyed" and self.path == "/v1/models":
            given = self.headers.get("Authorization")
            self.send_response(200 if given == f"Bearer {os.environ['LIFECYCLE_KEY']}" else 401)
        else:
            self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


if where.startswith("/"):

    class UnixHTTPServer(socketserver.UnixStreamServer):
        def get_request(self):
            request, _ = super().get_request()
            return request, ("local", 0)  # BaseHTTPRequestHandler expects a (host, port)

    UnixHTTPServer(where, Health).serve_forever()
else:
    http.server.HTTPServer(("127.0.0.1", int(where)), Health).serve_forever()
