#!/usr/bin/env python3
"""Record what the official `openai` Python package sends to `weft serve` and what it accepted.

Run by hand (never in CI), with the openai package from PyPI in a virtual environment of your
own:
    python3 -m venv /tmp/oaienv && /tmp/oaienv/bin/pip install openai
    /tmp/oaienv/bin/python scripts/record_openai.py build/weft

The client talks to a small recording proxy in front of a local `weft serve`; every request is
kept byte for byte (method, path, headers, body) with the answer it got, and for each call the
script also records what the client made of it (the fields it parsed, the images it decoded,
the exception it raised). tests/api/test_openai_replay.py (Debian's python3, in CI) sends the
same requests again and checks the answers field by field against tests/data/openai/. """
import base64
import http.client
import http.server
import json
import os
import sys
import threading

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "api"))
import serve_util  # noqa: E402
import openai  # noqa: E402  (PyPI; not in CI)

TOKEN = "sk-weft-recording"
# the model the replay test serves: the test suites' random-weight pipeline (tests/meson.build)
os.environ["WEFT_MODEL_PATH"] = os.path.join(ROOT, "tests", "data", "random", "flux-tiny")
SKIP_HEADERS = {"host", "content-length", "connection", "accept-encoding"}


def image_summary(data):
    """What an image's bytes are, as the replay test can derive them again."""
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return {"format": "png", "width": int.from_bytes(data[16:20], "big"),
                "height": int.from_bytes(data[20:24], "big")}
    if data[:3] == b"\xff\xd8\xff":
        return {"format": "jpeg"}
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return {"format": "webp"}
    return {"format": "unknown"}


def start_proxy(target, exchanges):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def handle_one(self, method):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
            headers = {k: v for k, v in self.headers.items() if k.lower() not in SKIP_HEADERS}
            c = http.client.HTTPConnection(target.host, target.port, timeout=120)
            c.request(method, self.path, body=body or None, headers=headers)
            r = c.getresponse()
            data = r.read()
            exchanges.append({
                "request": {"method": method, "path": self.path, "headers": headers,
                            "body": body.decode() if body else None},
                "response": {"status": r.status,
                             "content_type": r.getheader("Content-Type"),
                             "body": json.loads(data) if data else None},
            })
            self.send_response(r.status)
            for k, v in r.getheaders():
                if k.lower() not in ("content-length", "connection", "transfer-encoding"):
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            c.close()

        def do_GET(self):
            self.handle_one("GET")

        def do_POST(self):
            self.handle_one("POST")

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def main():
    weft = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "weft")
    srv = serve_util.Server(weft, token=TOKEN)
    exchanges, calls = [], []
    proxy = start_proxy(srv, exchanges)
    client = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % proxy.server_port,
                           api_key=TOKEN, max_retries=0, timeout=120)
    try:
        def call(name, fn, accepted):
            first = len(exchanges)
            try:
                result = fn()
                record = {"name": name, "ok": True, "accepted": accepted(result)}
            except openai.APIStatusError as e:
                record = {"name": name, "ok": False,
                          "accepted": {"exception": type(e).__name__, "status": e.status_code,
                                       "message": e.message, "param": getattr(e, "param", None),
                                       "code": getattr(e, "code", None),
                                       "type": getattr(e, "type", None)}}
            record["exchanges"] = list(range(first, len(exchanges)))
            calls.append(record)

        call("models.list", lambda: client.models.list(),
             lambda r: {"ids": [m.id for m in r.data], "owned_by": [m.owned_by for m in r.data]})

        def images(r):
            out = {"created_is_int": isinstance(r.created, int), "n": len(r.data), "images": []}
            for d in r.data:
                if d.b64_json is not None:
                    out["images"].append(image_summary(base64.b64decode(d.b64_json)))
                else:
                    out["images"].append({"url_path": d.url.split("/", 3)[3]})
            return out

        call("images.generate b64_json png", lambda: client.images.generate(
            model="flux-tiny", prompt="red-fox", n=2, size="64x64", response_format="b64_json",
            extra_body={"seed": 7, "steps": 2}), images)
        call("images.generate jpeg", lambda: client.images.generate(
            model="flux-tiny", prompt="lighthouse", size="64x48", output_format="jpeg",
            output_compression=30, extra_body={"seed": 3, "steps": 2}), images)
        call("images.generate webp", lambda: client.images.generate(
            prompt="city-night", size="48x64", output_format="webp",
            extra_body={"seed": 5, "num_inference_steps": 2, "guidance_scale": 4.0}), images)
        call("images.generate url", lambda: client.images.generate(
            model="flux-tiny", prompt="red-fox", size="64x64", response_format="url",
            extra_body={"seed": 9, "steps": 1}), images)
        call("images.generate text prompt", lambda: client.images.generate(
            model="flux-tiny", prompt="a red fox in the snow", size="64x64"), images)
        call("images.generate unknown model", lambda: client.images.generate(
            model="dall-e-3", prompt="red-fox", size="64x64"), images)
        call("images.generate negative prompt", lambda: client.images.generate(
            model="flux-tiny", prompt="red-fox", size="64x64",
            extra_body={"negative_prompt": "city-night", "true_cfg_scale": 3, "seed": 11,
                        "steps": 2}), images)
        call("images.generate true_cfg_scale alone", lambda: client.images.generate(
            model="flux-tiny", prompt="red-fox", size="64x64",
            extra_body={"true_cfg_scale": 3}), images)
    finally:
        proxy.shutdown()
        srv.stop()
        srv.cleanup()
    out = {"recorded_with": "openai %s (PyPI), scripts/record_openai.py" % openai.__version__,
           "token": TOKEN, "calls": calls, "exchanges": exchanges}
    for ex in exchanges:  # the images themselves are not kept: their summary is
        body = ex["response"]["body"]
        for d in (body or {}).get("data", []) if isinstance(body, dict) else []:
            if "b64_json" in d:
                d["b64_json"] = image_summary(base64.b64decode(d["b64_json"]))
    path = os.path.join(ROOT, "tests", "data", "openai", "recording.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
        f.write("\n")
    print("%d calls, %d exchanges recorded in %s" % (len(calls), len(exchanges), path))


if __name__ == "__main__":
    main()
