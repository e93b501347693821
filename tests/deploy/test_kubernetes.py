#!/usr/bin/python3
"""deploy/kubernetes: yamllint, then every field weft relies on, read from the manifests: the
coordinator's command and ports, its probes on /healthz and /readyz, the secrets it reads and
that the Secret holds, the worker port's Service published before it is ready, the workers'
count, command, coordinator address and GPU requests; and every WEFT_* variable and
--section.key option in them accepted by this build's weft (its own configuration table).
usage: test_kubernetes.py WEFT_BINARY SOURCE_ROOT"""
import os
import shutil
import subprocess
import sys

try:
    import yaml
except ImportError:
    print("python3-yaml is not installed: skipped")
    sys.exit(77)

WEFT, ROOT = sys.argv[1], sys.argv[2]
DIR = os.path.join(ROOT, "deploy", "kubernetes")
FILES = sorted(f for f in os.listdir(DIR) if f.endswith(".yaml"))


def main():
    lint = shutil.which("yamllint")
    if lint:
        subprocess.run([lint, "--strict", "-c", os.path.join(DIR, ".yamllint")] +
                       [os.path.join(DIR, f) for f in FILES], check=True)
    else:
        print("yamllint is not installed: the lint part is skipped")
    docs = []
    for f in FILES:
        with open(os.path.join(DIR, f)) as fh:
            docs += [d for d in yaml.safe_load_all(fh) if d]
    by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    for d in docs:
        assert d.get("apiVersion") and d["metadata"].get("name"), d
    secret = by[("Secret", "weft-secrets")]
    secret_keys = set(secret.get("stringData", {})) | set(secret.get("data", {}))

    coord = by[("Deployment", "weft-coordinator")]
    assert coord["spec"]["replicas"] == 1, "one coordinator: it owns the journal"
    assert coord["spec"]["strategy"]["type"] == "Recreate", "never two coordinators at once"
    pod = coord["spec"]["template"]
    c = pod["spec"]["containers"][0]
    cmd = c["command"]
    assert cmd[:2] == ["weft", "serve"] and "--runner" in cmd and \
        cmd[cmd.index("--runner") + 1] == "cluster", cmd
    listen = cmd[cmd.index("--listen") + 1]
    assert listen.startswith("0.0.0.0:"), "the API must listen beyond loopback in a pod"
    api_port = int(listen.split(":")[1])
    wl = [a for a in cmd if a.startswith("--cluster.listen=")]
    assert wl and wl[0].split("=", 1)[1].startswith("0.0.0.0:"), cmd
    worker_port = int(wl[0].rsplit(":", 1)[1])
    state = [a for a in cmd if a.startswith("--api.state_dir=")][0].split("=", 1)[1]
    mounts = {m["mountPath"] for m in c.get("volumeMounts", [])}
    assert state in mounts, "the state folder (journal, images) is on the volume"
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports["api"] == api_port and ports["workers"] == worker_port, ports
    live, ready = c["livenessProbe"]["httpGet"], c["readinessProbe"]["httpGet"]
    assert live["path"] == "/healthz" and ready["path"] == "/readyz", (live, ready)
    for probe in (live, ready):
        assert probe["port"] in ("api", api_port), probe
    env = {e["name"]: e for e in c["env"]}
    for name in ("WEFT_CLUSTER_SECRET", "WEFT_API_TOKEN"):
        ref = env[name]["valueFrom"]["secretKeyRef"]
        assert ref["name"] == "weft-secrets" and ref["key"] in secret_keys, (name, ref)
    workers_wanted = int(env["WEFT_CLUSTER_WORKERS"]["value"])
    labels = pod["metadata"]["labels"]

    api_svc = by[("Service", "weft")]
    wsvc = by[("Service", "weft-coordinator")]
    for svc in (api_svc, wsvc):
        assert all(labels.get(k) == v for k, v in svc["spec"]["selector"].items()), svc
    assert api_svc["spec"]["ports"][0]["port"] == api_port
    assert wsvc["spec"]["ports"][0]["port"] == worker_port
    assert wsvc["spec"].get("publishNotReadyAddresses") is True, \
        "the worker port must be reachable while /readyz says 503 (waiting for workers)"

    sts = by[("StatefulSet", "weft-worker")]
    assert sts["spec"]["replicas"] == workers_wanted, "workers = [cluster] workers"
    assert by[("Service", sts["spec"]["serviceName"])]["spec"]["clusterIP"] == "None"
    wc = sts["spec"]["template"]["spec"]["containers"][0]
    wcmd = wc["command"]
    assert wcmd[:2] == ["weft", "worker"], wcmd
    target = wcmd[wcmd.index("--coordinator") + 1]
    assert target == "%s:%d" % (wsvc["metadata"]["name"], worker_port), target
    for where in ("requests", "limits"):
        assert int(wc["resources"][where]["nvidia.com/gpu"]) == 1, wc["resources"]
    wenv = {e["name"]: e for e in wc["env"]}
    ref = wenv["WEFT_CLUSTER_SECRET"]["valueFrom"]["secretKeyRef"]
    assert ref["name"] == "weft-secrets" and ref["key"] in secret_keys

    # the configuration they set is weft's: variables and options through its own table
    for container in (c, wc):
        e = dict(os.environ)
        for item in container["env"]:
            e[item["name"]] = item.get("value", "from-a-secret")
        opts = [a for a in container["command"] if a.startswith("--") and "." in a.split("=")[0]]
        r = subprocess.run([WEFT, "--dump-config"] + opts, env=e, capture_output=True, text=True)
        assert r.returncode == 0, (container["command"], r.stderr)
        assert "<redacted>" in r.stdout
    print("kubernetes: %d manifests, probes, secrets, services, %d GPU workers: ok" %
          (len(docs), workers_wanted))


if __name__ == "__main__":
    main()
