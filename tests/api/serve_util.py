"""What the Python API tests share: `weft serve` as a child process on an ephemeral loopback
port, bounded waits, and plain HTTP/1.1 through http.client (Debian's python3 alone)."""
import http.client
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time


class Server:
    def __init__(self, weft, *extra, token=None):
        self.dir = tempfile.mkdtemp(prefix="weft-pytest-")
        self.token = token
        port_file = os.path.join(self.dir, "port")
        args = [weft, "serve", "--listen", "127.0.0.1:0", "--port-file", port_file,
                "--api.journal_dir=" + os.path.join(self.dir, "journal"),
                "--api.output_dir=" + os.path.join(self.dir, "jobs"), "--kernels.threads=1"]
        if token:
            args.append("--api.token=" + token)
        args += list(extra)
        self.log = open(os.path.join(self.dir, "serve.log"), "wb")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if os.path.exists(port_file):
                with open(port_file) as f:
                    text = f.read()
                if text.endswith("\n"):
                    self.addr = text.strip()
                    self.host, port = self.addr.rsplit(":", 1)
                    self.port = int(port)
                    return
            if self.proc.poll() is not None:
                raise RuntimeError("weft serve exited early:\n" + self.log_text())
            time.sleep(0.05)
        self.proc.kill()
        raise RuntimeError("weft serve did not listen within 30 s:\n" + self.log_text())

    def log_text(self):
        self.log.flush()
        with open(os.path.join(self.dir, "serve.log"), errors="replace") as f:
            return f.read()

    def conn(self, timeout=60):
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, auth=True, timeout=60):
        """(status, headers dict with lower-case names, body bytes)."""
        h = dict(headers or {})
        if auth and self.token:
            h["Authorization"] = "Bearer " + self.token
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
            h.setdefault("Content-Type", "application/json")
        if isinstance(body, str):
            body = body.encode()
        c = self.conn(timeout)
        try:
            c.request(method, path, body=body, headers=h)
            r = c.getresponse()
            data = r.read()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, data
        finally:
            c.close()

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode

    def cleanup(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def sse_events(data):
    """[(event, json)] of a text/event-stream body."""
    out = []
    for block in data.decode().split("\n\n"):
        name, payload = "message", None
        for line in block.split("\n"):
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                payload = line[5:].strip()
        if payload is not None:
            out.append((name, json.loads(payload)))
    return out
