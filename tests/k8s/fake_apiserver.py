#!/usr/bin/env python3
"""A stand-in Kubernetes API server for testing shardd's kubernetes launcher
with the real kubectl binary, without a cluster.

It answers what kubectl asks for in the launcher's four interactions --
`apply --server-side -f -`, `get jobs.batch,pods -l SEL -o json`,
`delete jobs.batch,services,secrets -l SEL`, `delete pods --force` -- in the
API's own shapes: legacy discovery (/api, /apis, /api/v1, /apis/batch/v1),
server-side apply PATCHes (application/apply-patch+yaml), label-selected
lists (JobList, PodList, ...), and DELETE with DeleteOptions. Objects applied
are kept; the Job's status and its pods come from a scenario file, a list of
steps that advances by one each time the pods of a Job are listed, so
repeated polls see the attempt evolve (pending -> running -> evicted, ...).
What it does NOT do: admission, defaulting, validation of objects, watches,
the Job controller's real timing. Each request is appended as one JSON line
to --log, for tests to assert on.

Usage: fake_apiserver.py --port-file F --log F [--scenario F.json]
Scenario: {"steps": [{"job_status": {...}, "pods": [{"index": 0, "status": {...},
                      "deleting": false}, ...]}, ...]}
"""
import argparse
import json
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# (group/version, resource, kind, namespaced)
RESOURCES = {
    ("v1", "pods"): "Pod",
    ("v1", "services"): "Service",
    ("v1", "secrets"): "Secret",
    ("batch/v1", "jobs"): "Job",
}
VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


def resource_list(gv):
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": gv,
        "resources": [
            {"name": r, "singularName": k.lower(), "namespaced": True, "kind": k, "verbs": VERBS}
            for (g, r), k in RESOURCES.items() if g == gv
        ],
    }


def openapi_v3(gv_path):
    gv = "v1" if gv_path == "api/v1" else gv_path[len("apis/"):]
    group, _, version = gv.rpartition("/")
    paths = {}
    for (g, r), k in RESOURCES.items():
        if g != gv:
            continue
        paths[f"/{gv_path}/namespaces/{{namespace}}/{r}/{{name}}"] = {"patch": {
            "operationId": f"patch{k}",
            "parameters": [{"name": "fieldValidation", "in": "query", "schema": {"type": "string"}},
                           {"name": "fieldManager", "in": "query", "schema": {"type": "string"}}],
            "x-kubernetes-group-version-kind": {"group": group, "version": version, "kind": k},
            "responses": {"200": {"description": "OK"}}}}
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.30.0-fake"}, "paths": paths,
            "components": {"schemas": {}}}


class State:
    def __init__(self, scenario, log_path):
        self.lock = threading.Lock()
        self.objects = {}  # (gv, resource, ns, name) -> object
        self.steps = scenario.get("steps", [])
        self.step = {}     # job name -> step index
        self.log = open(log_path, "a", buffering=1)
        self.uid = 0
        self.apply_error = scenario.get("apply_error")  # {"code", "reason", "message"}: refuse Job applies
        self.deleted_pods = set()

    def record(self, entry):
        self.log.write(json.dumps(entry) + "\n")

    def pods_of(self, job, advance):
        """The pods of a Job in the current scenario step."""
        name = job["metadata"]["name"]
        i = min(self.step.get(name, 0), len(self.steps) - 1) if self.steps else -1
        if advance:
            self.step[name] = self.step.get(name, 0) + 1
        if i < 0:
            return [], {}
        step = self.steps[i]
        tmpl = job["spec"]["template"]
        pods = []
        for p in step.get("pods", []):
            idx = p["index"]
            if f"{name}-{idx}-{p.get('suffix', 'x7k2p')}" in self.deleted_pods:
                continue
            meta = {
                "name": f"{name}-{idx}-{p.get('suffix', 'x7k2p')}",
                "namespace": job["metadata"]["namespace"],
                "uid": f"pod-uid-{name}-{idx}",
                "labels": dict(tmpl["metadata"].get("labels", {}),
                               **{"batch.kubernetes.io/job-name": name, "job-name": name,
                                  "batch.kubernetes.io/job-completion-index": str(idx)}),
                "annotations": {"batch.kubernetes.io/job-completion-index": str(idx)},
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name,
                                     "uid": job["metadata"]["uid"], "controller": True,
                                     "blockOwnerDeletion": True}],
            }
            if p.get("deleting"):
                meta["deletionTimestamp"] = "2025-06-01T10:05:00Z"
            pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                         "spec": {"hostname": f"{name}-{idx}", "subdomain": tmpl["spec"].get("subdomain", ""),
                                  "containers": tmpl["spec"]["containers"]},
                         "status": p.get("status", {"phase": "Pending"})})
        return pods, step.get("job_status", {})


def selector_matches(sel, labels):
    if not sel:
        return True
    for term in sel.split(","):
        k, _, v = term.partition("=")
        if labels.get(k) != v:
            return False
    return True


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state = None

    def log_message(self, *args):
        pass

    def send_json(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def status(self, code, reason, message, details=None):
        self.send_json(code, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                              "message": message, "reason": reason, "details": details or {}, "code": code})

    def route(self):
        """(gv, resource, ns, name) from a resource path, or None."""
        parts = [p for p in self.url.path.split("/") if p]
        if parts[:2] == ["api", "v1"]:
            gv, rest = "v1", parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            gv, rest = f"{parts[1]}/{parts[2]}", parts[3:]
        else:
            return None
        if len(rest) >= 3 and rest[0] == "namespaces":
            ns, resource, name = rest[1], rest[2], rest[3] if len(rest) > 3 else None
        else:
            return None
        if (gv, resource) not in RESOURCES:
            return None
        return gv, resource, ns, name

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n).decode() if n else ""

    def handle_any(self, method):
        self.url = urllib.parse.urlparse(self.path)
        query = urllib.parse.parse_qs(self.url.query)
        body = self.body()
        st = self.state
        with st.lock:
            st.record({"method": method, "path": self.url.path, "query": {k: v[0] for k, v in query.items()},
                       "content_type": self.headers.get("Content-Type", ""), "body": body})
            path = self.url.path
            if method == "GET" and path == "/api":
                return self.send_json(200, {"kind": "APIVersions", "versions": ["v1"],
                                            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0",
                                                                            "serverAddress": "127.0.0.1"}]})
            if method == "GET" and path == "/apis":
                return self.send_json(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
                    {"name": "batch", "versions": [{"groupVersion": "batch/v1", "version": "v1"}],
                     "preferredVersion": {"groupVersion": "batch/v1", "version": "v1"}}]})
            if method == "GET" and path in ("/api/v1", "/apis/batch/v1"):
                return self.send_json(200, resource_list("v1" if path == "/api/v1" else "batch/v1"))
            if method == "GET" and path == "/openapi/v3":
                # Only what kubectl's --validate=strict check reads: which
                # group-versions there are, and (below) that their PATCH
                # operations take fieldValidation, so kubectl leaves strict
                # validation to the server instead of validating client-side.
                return self.send_json(200, {"paths": {
                    gv if gv == "api/v1" else gv: {"serverRelativeURL": f"/openapi/v3/{gv}?hash=fake"}
                    for gv in ("api/v1", "apis/batch/v1")}})
            if method == "GET" and path.startswith("/openapi/v3/"):
                return self.send_json(200, openapi_v3(path[len("/openapi/v3/"):]))
            if method == "GET" and path == "/version":
                return self.send_json(200, {"major": "1", "minor": "30", "gitVersion": "v1.30.0-fake"})
            r = self.route()
            if r is None:
                return self.status(404, "NotFound", f"the server could not find the requested resource ({path})")
            gv, resource, ns, name = r
            kind = RESOURCES[(gv, resource)]
            if method == "PATCH" and name:
                return self.apply(gv, resource, kind, ns, name, body)
            if method == "GET" and not name:
                return self.list(gv, resource, kind, ns, query.get("labelSelector", [""])[0])
            if method == "GET" and name:
                obj = self.get(gv, resource, ns, name)
                if obj is None:
                    return self.status(404, "NotFound", f'{resource} "{name}" not found',
                                       {"name": name, "kind": resource})
                return self.send_json(200, obj)
            if method == "DELETE" and name and resource == "pods":
                pod = self.get(gv, resource, ns, name)
                if pod is None:
                    return self.status(404, "NotFound", f'pods "{name}" not found', {"name": name, "kind": "pods"})
                st.deleted_pods.add(name)
                return self.send_json(200, pod)
            if method == "DELETE" and name:
                key = (gv, resource, ns, name)
                if key not in st.objects:
                    return self.status(404, "NotFound", f'{resource} "{name}" not found',
                                       {"name": name, "kind": resource})
                obj = st.objects.pop(key)
                return self.send_json(200, obj)
            return self.status(405, "MethodNotAllowed", f"{method} {path} is not supported here")

    def apply(self, gv, resource, kind, ns, name, body):
        ctype = self.headers.get("Content-Type", "")
        if ctype != "application/apply-patch+yaml":
            return self.status(415, "UnsupportedMediaType", f"this stand-in only takes server-side apply, got {ctype}")
        try:
            obj = json.loads(body)
        except ValueError:
            import yaml  # kubectl sends JSON; YAML only if that ever changes
            obj = yaml.safe_load(body)
        if obj.get("kind") != kind or obj.get("metadata", {}).get("name") != name:
            return self.status(400, "BadRequest", f"body is {obj.get('kind')} {obj.get('metadata', {}).get('name')}")
        st = self.state
        if st.apply_error and kind == "Job":
            e = st.apply_error
            return self.status(e["code"], e["reason"], e["message"], {"name": name, "group": "batch", "kind": "Job"})
        key = (gv, resource, ns, name)
        st.uid += 1
        obj.setdefault("metadata", {})
        obj["metadata"].update({"namespace": ns, "uid": f"uid-{st.uid}", "resourceVersion": str(st.uid),
                                "creationTimestamp": "2025-06-01T10:00:00Z"})
        st.objects[key] = obj
        return self.send_json(200 if key in st.objects else 201, obj)

    def get(self, gv, resource, ns, name):
        st = self.state
        if resource == "pods":
            for o in self.list_items("batch/v1", "jobs", ns, ""):
                for p in st.pods_of(o, advance=False)[0]:
                    if p["metadata"]["name"] == name:
                        return p
            return None
        obj = st.objects.get((gv, resource, ns, name))
        if obj is not None and resource == "jobs":
            obj = dict(obj, status=st.pods_of(obj, advance=False)[1])
        return obj

    def list_items(self, gv, resource, ns, sel):
        st = self.state
        if resource == "pods":
            out = []
            for job in self.list_items("batch/v1", "jobs", ns, ""):
                out += [p for p in st.pods_of(job, advance=True)[0]
                        if selector_matches(sel, p["metadata"]["labels"])]
            return out
        out = []
        for (g, r, n, _), o in sorted(st.objects.items()):
            if g == gv and r == resource and n == ns and selector_matches(sel, o["metadata"].get("labels", {})):
                if resource == "jobs":
                    o = dict(o, status=st.pods_of(o, advance=False)[1])
                out.append(o)
        return out

    def list(self, gv, resource, kind, ns, sel):
        items = self.list_items(gv, resource, ns, sel)
        return self.send_json(200, {"kind": kind + "List", "apiVersion": gv, "metadata": {"resourceVersion": "1"},
                                    "items": items})

    def do_GET(self):
        self.handle_any("GET")

    def do_PATCH(self):
        self.handle_any("PATCH")

    def do_DELETE(self):
        self.handle_any("DELETE")

    def do_POST(self):
        self.handle_any("POST")

    def do_PUT(self):
        self.handle_any("PUT")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--scenario")
    a = ap.parse_args()
    scenario = json.load(open(a.scenario)) if a.scenario else {}
    Handler.state = State(scenario, a.log)
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with open(a.port_file + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))
    import os
    os.rename(a.port_file + ".tmp", a.port_file)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
