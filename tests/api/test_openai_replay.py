#!/usr/bin/python3
"""The requests the official `openai` Python package sent (tests/data/openai/recording.json,
made by scripts/record_openai.py), sent again byte for byte to this build's `weft serve`; every
answer is checked field by field against the recorded one, and what the client accepted then is
derived again from the new answer and must be the same. Debian's python3 only.
usage: test_openai_replay.py WEFT_BINARY SOURCE_ROOT"""
import base64
import http.client
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_util  # noqa: E402

WEFT, ROOT = sys.argv[1], sys.argv[2]
with open(os.path.join(ROOT, "tests", "data", "openai", "recording.json")) as f:
    REC = json.load(f)

URL = re.compile(r"^http://[^/]+/(v1/jobs/[0-9a-f]{16}/images/[0-9]+(\?format=(jpeg|webp))?)$")


def image_summary(data):
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return {"format": "png", "width": int.from_bytes(data[16:20], "big"),
                "height": int.from_bytes(data[20:24], "big")}
    if data[:3] == b"\xff\xd8\xff":
        return {"format": "jpeg"}
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return {"format": "webp"}
    return {"format": "unknown"}


def compare(want, got, where):
    """Field by field: same keys, same values, except what differs from run to run by nature
    (times, job ids in URLs, drawn seeds), which is checked for its form."""
    if isinstance(want, dict):
        assert isinstance(got, dict), "%s: %r is not an object" % (where, got)
        assert sorted(want) == sorted(got), "%s: fields %s, recorded %s" % (
            where, sorted(got), sorted(want))
        for k in want:
            compare(want[k], got[k], where + "." + k)
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), "%s: %r vs %r" % (where, got, want)
        for i, (w, g) in enumerate(zip(want, got)):
            compare(w, g, "%s[%d]" % (where, i))
    elif where.endswith(".created"):
        assert isinstance(got, int) and got > 1500000000, "%s: %r" % (where, got)
    elif where.endswith(".url"):
        assert URL.match(got), "%s: %r" % (where, got)
        assert URL.match(want).group(3) == URL.match(got).group(3)
    elif where.endswith(".weft.job"):
        assert re.match(r"^[0-9a-f]{16}$", got), "%s: %r" % (where, got)
    else:
        assert want == got, "%s: %r, recorded %r" % (where, got, want)


def accepted(name, status, body, srv):
    """What the openai client made of an answer, derived as scripts/record_openai.py did."""
    if status >= 400:
        e = body["error"]
        return {"status": status, "message": "Error code: %d - %s" % (status, e["message"]),
                "param": e.get("param"), "code": e.get("code"), "type": e.get("type")}
    if name == "models.list":
        return {"ids": [m["id"] for m in body["data"]], "owned_by": [m["owned_by"] for m in body["data"]]}
    out = {"created_is_int": isinstance(body["created"], int), "n": len(body["data"]), "images": []}
    for d in body["data"]:
        if "b64_json" in d:
            out["images"].append(image_summary(base64.b64decode(d["b64_json"])))
        else:
            path = URL.match(d["url"]).group(1)
            st, _, img = srv.request("GET", "/" + path)  # the URL serves the image
            assert st == 200 and image_summary(img)["format"] in ("png", "jpeg", "webp")
            out["images"].append({"url_path": path})
    return out


def main():
    srv = serve_util.Server(WEFT, token=REC["token"])
    try:
        answers = []
        for ex in REC["exchanges"]:
            req = ex["request"]
            c = http.client.HTTPConnection(srv.host, srv.port, timeout=120)
            headers = dict(req["headers"])
            body = req["body"].encode() if req["body"] is not None else None
            c.request(req["method"], req["path"], body=body, headers=headers)
            r = c.getresponse()
            data = r.read()
            c.close()
            want = ex["response"]
            assert r.status == want["status"], "%s %s: %d, recorded %d: %s" % (
                req["method"], req["path"], r.status, want["status"], data[:300])
            assert r.getheader("Content-Type") == want["content_type"]
            got = json.loads(data)
            answers.append(got)
            shown = json.loads(data)
            for d in shown.get("data", []) if isinstance(shown, dict) else []:
                if "b64_json" in d:
                    d["b64_json"] = image_summary(base64.b64decode(d["b64_json"]))
            if isinstance(shown, dict) and "weft" in shown and "seed" in shown["weft"]:
                req_body = json.loads(req["body"]) if req["body"] else {}
                if req_body.get("seed", -1) == -1:  # drawn: only its form is fixed
                    assert re.match(r"^[0-9]+$", shown["weft"]["seed"])
                    shown["weft"]["seed"] = want["body"]["weft"]["seed"]
            compare(want["body"], shown, req["method"] + " " + req["path"])
        for call in REC["calls"]:
            for i in call["exchanges"]:
                ans = answers[i]
                status = REC["exchanges"][i]["response"]["status"]
                mine = accepted(call["name"], status, ans, srv)
                rec = dict(call["accepted"])
                rec.pop("exception", None)
                if "images" in rec:
                    for a, b in zip(rec["images"], mine["images"]):
                        if "url_path" in a:  # job ids differ from run to run
                            assert re.sub(r"[0-9a-f]{16}", "ID", a["url_path"]) == \
                                re.sub(r"[0-9a-f]{16}", "ID", b["url_path"])
                            b["url_path"] = a["url_path"]
                assert mine == rec, "%s: the client would see %r, recorded %r" % (
                    call["name"], mine, rec)
        print("openai replay: %d requests of %s, %d calls: the same answers" % (
            len(REC["exchanges"]), REC["recorded_with"], len(REC["calls"])))
        assert srv.stop() == 0
    finally:
        if srv.proc.poll() is None:
            print(srv.log_text()[-3000:])
        srv.cleanup()


if __name__ == "__main__":
    main()
