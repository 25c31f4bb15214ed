#!/usr/bin/env python3
"""Reads a shardd run report (report.html) and checks it: the embedded
report-data JSON, the SVG charts' point counts against it, the events, the
plan and the final figures. Prints the curves' sizes; exits 1 naming what is
wrong. Usage: read_report.py REPORT.html MIN_STEPS [STATE]"""
import html.parser
import json
import sys


class Report(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.data_text, self.in_data, self.charts, self.ids, self.external = "", False, {}, set(), []
        self.polylines, self.current_chart = {}, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        for key in ("src", "href"):  # self-contained: nothing fetched
            if key in a and not a[key].startswith("#"):
                self.external.append(a[key])
        if tag == "script" and a.get("id") == "report-data":
            self.in_data = True
        if tag == "svg" and a.get("id", "").startswith("chart-"):
            self.current_chart = a["id"][6:]
            self.charts[self.current_chart] = int(a["data-points"])
        if tag == "polyline" and self.current_chart:
            self.polylines[self.current_chart] = len(a["points"].split())

    def handle_endtag(self, tag):
        if tag == "script":
            self.in_data = False
        if tag == "svg":
            self.current_chart = None

    def handle_data(self, d):
        if self.in_data:
            self.data_text += d


def main():
    path, min_steps = sys.argv[1], int(sys.argv[2])
    want_state = sys.argv[3] if len(sys.argv) > 3 else "SUCCEEDED"
    r = Report()
    r.feed(open(path, encoding="utf-8").read())
    fail = lambda m: sys.exit(f"{path}: {m}")
    if r.external:
        fail(f"not self-contained: {r.external}")
    data = json.loads(r.data_text)
    m, job, final = data["metrics"], data["job"], data["final"]
    if job["state"] != want_state or final["state"] != want_state:
        fail(f"state {job['state']}, expected {want_state}")
    steps = m["steps"]
    if len(steps) < min_steps or steps != sorted(steps):
        fail(f"{len(steps)} steps (expected >= {min_steps}, increasing)")
    for key, chart in (("loss", "loss"), ("tokens_per_s", "tokens_per_s"), ("lr", "lr"), ("grad_norm", "grad_norm")):
        finite = [v for v in m[key] if v is not None]
        if len(m[key]) != len(steps) or len(finite) < min_steps:
            fail(f"{key}: {len(finite)} finite points of {len(m[key])}")
        if r.charts.get(chart) != len(finite) or r.polylines.get(chart) != len(finite):
            fail(f"chart {chart}: svg says {r.charts.get(chart)}, polyline has {r.polylines.get(chart)}, data {len(finite)}")
    if abs(final["final_loss"] - [v for v in m["loss"] if v is not None][-1]) > 1e-9 * max(1, final["final_loss"]):
        fail("final_loss is not the last loss point")
    if not (final["mean_tokens_per_s"] > 0 and final["steps"] >= min_steps):
        fail(f"final figures: {final}")
    kinds = [e["kind"] for e in job["events"]]
    for k in ("submitted", "checkpoint_committed"):
        if k not in kinds:
            fail(f"no {k} event in {kinds}")
    if "worker(s)" not in job.get("plan", ""):
        fail("no admission plan")
    for i in ("events", "checkpoints", "plan", "final"):
        if i not in r.ids:
            fail(f"no element #{i}")
    # A job without eval: says so; one with it draws the eval loss instead.
    if final["eval_loss"] is None and "eval-note" not in r.ids:
        fail("no element #eval-note (the job has no eval loss)")
    if final["eval_loss"] is not None and not r.charts.get("eval_loss"):
        fail(f"an eval loss ({final['eval_loss']}) but no eval loss chart")
    if not m["commits"]:
        fail("no checkpoint commits in the data")
    print(f"report ok: {len(steps)} points per curve, loss {m['loss'][0]:.4f} -> {final['final_loss']:.4f}, "
          f"{len(kinds)} events, {len(m['commits'])} commits, mean {final['mean_tokens_per_s']:.0f} tokens/s")


if __name__ == "__main__":
    main()
