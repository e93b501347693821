#!/usr/bin/python3
"""docs/openapi.json against the real server: every endpoint is called (successes and the
refusals that can be provoked), and every answer's status, content type and body are checked
against the document (Debian's python3-jsonschema, Draft 2020-12 as OpenAPI 3.1 uses). An
answer the document does not describe, or an operation never exercised, fails the test, so the
document cannot drift from the code. usage: test_openapi.py WEFT_BINARY SOURCE_ROOT"""
import copy
import json
import os
import re
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_util  # noqa: E402

try:
    import jsonschema
except ImportError:
    print("python3-jsonschema is missing (scripts/install-deps.sh): skipped")
    sys.exit(77)

WEFT, ROOT = sys.argv[1], sys.argv[2]
with open(os.path.join(ROOT, "docs", "openapi.json")) as f:
    DOC = json.load(f)


def inline(schema):
    """The schema with every #/components/... $ref replaced by its target (no cycles here)."""
    if isinstance(schema, dict):
        if "$ref" in schema:
            target = DOC
            for part in schema["$ref"].lstrip("#/").split("/"):
                target = target[part]
            rest = {k: v for k, v in schema.items() if k != "$ref"}
            merged = copy.deepcopy(inline(target))
            if rest:
                return {"allOf": [merged, inline(rest)]}
            return merged
        return {k: inline(v) for k, v in schema.items()}
    if isinstance(schema, list):
        return [inline(v) for v in schema]
    return schema


def check(schema, value, what):
    s = inline(schema)
    jsonschema.Draft202012Validator.check_schema(s)
    errors = sorted(jsonschema.Draft202012Validator(s).iter_errors(value), key=str)
    if errors:
        raise AssertionError("%s does not match the document: %s\n%s" %
                             (what, errors[0].message, json.dumps(value)[:2000]))


OPS = []  # (method, regex, template, operation)
for template, item in DOC["paths"].items():
    rx = "^" + re.sub(r"\{[^}]+\}", "[^/]+", template) + "$"
    for method, op in item.items():
        if method in ("get", "post", "delete", "put", "patch"):
            OPS.append((method.upper(), re.compile(rx), template, op))
seen = set()
checked = 0


def validate(method, path, status, headers, body):
    global checked
    bare = path.split("?")[0]
    ops = [o for o in OPS if o[0] == method and o[1].match(bare)]
    assert ops, "%s %s: not in the document" % (method, bare)
    _, _, template, op = ops[0]
    responses = op["responses"]
    assert str(status) in responses, "%s %s answered %d, which the document does not list (%s)" % (
        method, template, status, ", ".join(responses))
    seen.add((method, template, status))
    doc_resp = responses[str(status)]
    content = doc_resp.get("content")
    ctype = headers.get("content-type", "").split(";")[0].strip()
    if not content:
        assert not body, "%s %s %d: a body the document does not describe" % (method, template, status)
        checked += 1
        return
    assert ctype in content, "%s %s %d: Content-Type %s, the document says %s" % (
        method, template, status, ctype, ", ".join(content))
    if ctype == "application/json":
        check(content[ctype]["schema"], json.loads(body), "%s %s %d" % (method, template, status))
    elif ctype == "text/event-stream":
        events = op.get("x-weft-events", {})
        for name, data in serve_util.sse_events(body):
            assert name in events, "event %s is not in the document" % name
            check(events[name], data, "%s %s event %s" % (method, template, name))
    checked += 1


def call(srv, method, path, body=None, headers=None, auth=True, want=None):
    status, h, data = srv.request(method, path, body, headers, auth)
    validate(method, path, status, h, data)
    if want is not None:
        assert status == want, "%s %s: %d, want %d: %s" % (method, path, status, want, data[:300])
    return status, h, data


def main():
    tok = "t0ken"
    srv = serve_util.Server(WEFT, "--api.max_body=2KiB", "--api.sync_timeout_ms=5000",
                            "--api.shutdown_grace_ms=30000", token=tok)
    try:
        run(srv)
        srv.stop()
    finally:
        if srv.proc.poll() is None:
            print(srv.log_text()[-3000:])
        srv.cleanup()
    # a model with text encoders: text prompts, their records, the OpenAI endpoint with text
    text = serve_util.Server(WEFT, "--model=%s" % os.path.join(ROOT, "tests", "data", "text", "pipeline"),
                             token=tok)
    try:
        run_text(text)
        text.stop()
    finally:
        if text.proc.poll() is None:
            print(text.log_text()[-3000:])
        text.cleanup()
    # every operation answered at least once with a success
    for method, _, template, op in OPS:
        ok = [s for (m, t, s) in seen if m == method and t == template and s < 300]
        assert ok, "%s %s was never exercised with a success" % (method, template)
    print("openapi: %d answers of %d operations checked against docs/openapi.json" %
          (checked, len(OPS)))


def run(srv):
    # the document served is the one in the repository
    _, _, data = call(srv, "GET", "/openapi.json", auth=False, want=200)
    assert json.loads(data) == DOC, "the served /openapi.json differs from docs/openapi.json"
    call(srv, "GET", "/", auth=False, want=200)
    call(srv, "GET", "/healthz", auth=False, want=200)
    call(srv, "GET", "/readyz", auth=False, want=200)
    call(srv, "GET", "/v1/jobs", auth=False, want=401)
    call(srv, "GET", "/metrics", want=200)
    call(srv, "GET", "/v1/cluster", want=200)
    call(srv, "GET", "/v1/models", want=200)
    small = {"prompt": "red-fox", "width": 64, "height": 64, "steps": 2, "count": 2}
    _, h, data = call(srv, "POST", "/v1/jobs", small, want=202)
    job = json.loads(data)["id"]
    call(srv, "POST", "/v1/jobs", {"prompt": "red-fox", "colour": 1}, want=400)
    call(srv, "POST", "/v1/jobs", "{}", {"Content-Type": "text/plain"}, want=415)
    call(srv, "POST", "/v1/jobs", {"prompt": "red-fox", "pad": "x" * 3000}, want=413)
    key = {"Idempotency-Key": "openapi-1"}
    call(srv, "POST", "/v1/jobs", small, key, want=202)
    _, h, _ = call(srv, "POST", "/v1/jobs", small, key, want=202)
    assert h.get("idempotent-replayed") == "true"
    call(srv, "POST", "/v1/jobs", {"prompt": "lighthouse"}, key, want=422)
    # the event stream, every event validated, until the end
    _, h, data = call(srv, "GET", "/v1/jobs/%s/events" % job, want=200)
    assert [e for e, _ in serve_util.sse_events(data)][-1] == "end"
    call(srv, "GET", "/v1/jobs/%s" % job, want=200)
    call(srv, "GET", "/v1/jobs/ffffffffffffffff", want=404)
    call(srv, "GET", "/v1/jobs/ffffffffffffffff/events", want=404)
    call(srv, "GET", "/v1/jobs?limit=1", want=200)
    call(srv, "GET", "/v1/jobs?state=done&order=desc", want=200)
    call(srv, "GET", "/v1/jobs?limit=0", want=400)
    for fmt in ("png", "jpeg", "webp"):
        call(srv, "GET", "/v1/jobs/%s/images/1?format=%s" % (job, fmt), want=200)
    call(srv, "GET", "/v1/jobs/%s/images/0?format=gif" % job, want=400)
    call(srv, "GET", "/v1/jobs/%s/images/7" % job, want=404)
    os.remove(os.path.join(srv.dir, "jobs", job, "0.png"))
    call(srv, "GET", "/v1/jobs/%s/images/0" % job, want=410)
    call(srv, "DELETE", "/v1/jobs/%s" % job, want=409)
    call(srv, "DELETE", "/v1/jobs/ffffffffffffffff", want=404)
    # the OpenAI endpoint: answers and refusals
    gen = {"prompt": "red-fox", "size": "64x64", "steps": 2}
    call(srv, "POST", "/v1/images/generations", gen, want=200)
    call(srv, "POST", "/v1/images/generations", dict(gen, response_format="url", n=2), want=200)
    call(srv, "POST", "/v1/images/generations", dict(gen, output_format="webp"), want=200)
    call(srv, "POST", "/v1/images/generations", {"prompt": "a fox"}, want=400)
    call(srv, "POST", "/v1/images/generations", dict(gen, model="gpt-image-1"), want=404)
    call(srv, "POST", "/v1/images/generations", "[]", {"Content-Type": "text/plain"}, want=415)
    call(srv, "POST", "/v1/images/generations", dict(gen, user="x" * 3000), want=413)
    okey = {"Idempotency-Key": "openapi-2"}
    call(srv, "POST", "/v1/images/generations", gen, okey, want=200)
    call(srv, "POST", "/v1/images/generations", dict(gen, n=2), okey, want=422)
    # a long job holds the runner: a queued job cancelled (200), the running one (202), a
    # generation cancelled while it waits (409), one that outwaits sync_timeout_ms (504)
    big = {"prompt": "red-fox", "width": 1024, "height": 1024, "steps": 40}
    _, _, data = call(srv, "POST", "/v1/jobs", big, want=202)
    running = json.loads(data)["id"]
    _, _, data = call(srv, "POST", "/v1/jobs", small, want=202)
    call(srv, "DELETE", "/v1/jobs/%s" % json.loads(data)["id"], want=200)
    answers = {}

    def wait_gen():
        answers["r"] = srv.request("POST", "/v1/images/generations", gen)
    t = threading.Thread(target=wait_gen)
    t.start()
    waiting = None
    for _ in range(200):
        _, _, data = srv.request("GET", "/v1/jobs?state=queued")
        queued = json.loads(data)["jobs"]
        if queued:
            waiting = queued[0]["id"]
            break
        time.sleep(0.01)
    assert waiting
    call(srv, "DELETE", "/v1/jobs/%s" % waiting, want=200)
    t.join(30)
    status, h, data = answers["r"]
    validate("POST", "/v1/images/generations", status, h, data)
    assert status == 409, (status, data)
    call(srv, "POST", "/v1/images/generations", gen, want=504)
    # shutting down: probes say so, submissions get 503
    for _ in range(100):
        _, _, data = srv.request("GET", "/v1/jobs/%s" % running)
        if json.loads(data)["state"] == "running":
            break
        time.sleep(0.02)
    srv.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        status, _, _ = srv.request("GET", "/healthz", auth=False)
        if status == 503:
            break
        time.sleep(0.02)
    call(srv, "GET", "/healthz", auth=False, want=503)
    call(srv, "GET", "/readyz", auth=False, want=503)
    call(srv, "POST", "/v1/jobs", small, want=503)
    call(srv, "POST", "/v1/images/generations", gen, want=503)
    call(srv, "POST", "/v1/images/generations", gen, auth=False, want=401)
    srv.proc.send_signal(signal.SIGTERM)  # the second: stop the running job now


def run_text(srv):
    call(srv, "GET", "/v1/models", want=200)
    call(srv, "GET", "/v1/cluster", want=200)
    one = {"prompt": ["a photo of a cat", ""], "width": 48, "height": 32, "steps": 1,
           "max_sequence_length": 32}
    _, _, data = call(srv, "POST", "/v1/jobs", one, want=202)
    job = json.loads(data)["id"]
    _, _, data = call(srv, "GET", "/v1/jobs/%s/events" % job, want=200)
    assert [e for e, _ in serve_util.sse_events(data)][-1] == "end"
    _, _, data = call(srv, "GET", "/v1/jobs/%s" % job, want=200)
    assert json.loads(data)["request"]["prompt_types"] == ["text", "text"], data
    call(srv, "POST", "/v1/jobs", {"prompt_embeds": "red-fox"}, want=400)
    call(srv, "POST", "/v1/jobs", {"prompt": "a", "max_sequence_length": 513}, want=400)
    gen = {"prompt": "a lighthouse at dusk", "size": "48x32", "steps": 1, "max_sequence_length": 16}
    call(srv, "POST", "/v1/images/generations", gen, want=200)
    call(srv, "GET", "/metrics", want=200)


if __name__ == "__main__":
    main()
