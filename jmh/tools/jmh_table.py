#!/usr/bin/env python3
"""Turns a JMH JSON result file (-rf json) into a Markdown table: kvpool vs baseline, side by side.

Benchmarks are paired by class, operation and parameters: `Class.kvpool_<op>` with `Class.baseline_<op>`.
Times are the primary metric (avgt, ns/op) with JMH's 99.9% confidence half-width; allocation is
gc.alloc.rate.norm (B/op) when the run used -prof gc. The pool benchmarks' goals are checked and printed as
MET / NOT MET, never hidden.

usage: jmh_table.py RESULT.json          the table
       jmh_table.py --jvm RESULT.json    one Markdown bullet naming the JVM and JMH settings of the run
"""
import json
import math
import sys

# Goals: (class, op) -> function(kvpool, baseline) -> [(description, met)]; kvpool and baseline are dicts with
# 'score' (ns/op), 'error' and 'alloc' (B/op, None when not measured); baseline may be None.
ALLOC_FREE_MAX_B = 1.0  # B/op below which a benchmark counts as allocation-free (JMH's own overhead is ~0.01)


def goal_alloc_free(k, b):
    out = []
    out.append(("≤ 20 ns", k["score"] <= 20.0))
    ratio = b["score"] / k["score"] if b else float("nan")
    out.append(("≥ 5× baseline", ratio >= 5.0))
    return out


def goal_admission(k, b):
    out = [("≤ 100 ns", k["score"] <= 100.0)]
    if k["alloc"] is None:
        out.append(("0 B/op (not measured: run with -prof gc)", False))
    else:
        out.append(("0 B/op", k["alloc"] < ALLOC_FREE_MAX_B))
    return out


GOALS = {
    ("PageAllocBenchmark", "alloc_free"): goal_alloc_free,
    ("PageAllocBenchmark", "alloc_free_cached"): goal_alloc_free,
    ("AdmissionBenchmark", "reserve_cancel"): goal_admission,
}


def fmt_time(score, error):
    if score is None:
        return "—"
    s = f"{score:,.1f}" if score < 1000 else f"{score:,.0f}"
    if error is None or (isinstance(error, float) and math.isnan(error)):
        return s
    e = f"{error:,.1f}" if error < 1000 else f"{error:,.0f}"
    return f"{s} ± {e}"


def fmt_alloc(a):
    if a is None:
        return "—"
    if a < ALLOC_FREE_MAX_B:
        return "0"
    return f"{a:,.0f}"


def main(path):
    with open(path) as f:
        runs = json.load(f)
    rows = {}
    order = []
    others = []  # reference measurements that have no kvpool/baseline pair (e.g. floor_three_cas)
    for r in runs:
        fq = r["benchmark"]
        cls, method = fq.split(".")[-2], fq.split(".")[-1]
        if "_" not in method:
            continue
        side, op = method.split("_", 1)
        if side not in ("kvpool", "baseline"):
            pm = r["primaryMetric"]
            err = pm.get("scoreError")
            err = None if err in (None, "NaN") else float(err)
            others.append((f"{cls}.{method}", float(pm["score"]), err))
            continue
        params = ", ".join(f"{k}={v}" for k, v in sorted((r.get("params") or {}).items()))
        key = (cls, op, params)
        if key not in rows:
            rows[key] = {}
            order.append(key)
        pm = r["primaryMetric"]
        if pm["scoreUnit"] != "ns/op":
            raise SystemExit(f"{fq}: expected ns/op, got {pm['scoreUnit']} (run with -bm avgt -tu ns)")
        err = pm.get("scoreError")
        err = None if err in (None, "NaN") else float(err)
        sm = (r.get("secondaryMetrics") or {}).get("gc.alloc.rate.norm")
        rows[key][side] = {"score": float(pm["score"]), "error": err,
                           "alloc": float(sm["score"]) if sm else None}

    print("| Benchmark | Params | kvpool ns/op | baseline ns/op | baseline ÷ kvpool | kvpool B/op | baseline B/op | Goal |")
    print("|---|---|--:|--:|--:|--:|--:|---|")
    for key in order:
        cls, op, params = key
        k, b = rows[key].get("kvpool"), rows[key].get("baseline")
        ratio = f"{b['score'] / k['score']:.2f}×" if k and b else "—"
        goal = ""
        if k and (cls, op) in GOALS:
            goal = "; ".join(f"{d}: **{'MET' if ok else 'NOT MET'}**" for d, ok in GOALS[(cls, op)](k, b))
        print(f"| {cls}.{op} | {params or '—'} | {fmt_time(k and k['score'], k and k['error'])} | "
              f"{fmt_time(b and b['score'], b and b['error'])} | {ratio} | {fmt_alloc(k and k['alloc'])} | "
              f"{fmt_alloc(b and b['alloc'])} | {goal or '—'} |")
    print()
    for name, score, err in others:
        print(f"Reference (not a comparison): `{name}` {fmt_time(score, err)} ns/op.")
    if others:
        print()
    print("Times: JMH average time, ± the 99.9% confidence half-width. baseline ÷ kvpool > 1 means kvpool is faster. "
          f"B/op: gc.alloc.rate.norm from -prof gc (below {ALLOC_FREE_MAX_B:g} B/op shown as 0).")


def jvm(path):
    with open(path) as f:
        runs = json.load(f)
    if not runs:
        raise SystemExit(f"{path}: no results")
    r = runs[0]
    print(f"- JVM: {r.get('vmName')} {r.get('vmVersion')} (JDK {r.get('jdkVersion')}), "
          f"JMH {r.get('jmhVersion')}; forked JVM args: `{' '.join(r.get('jvmArgs') or [])}`")
    print(f"- JMH: {r.get('forks')} fork, {r.get('warmupIterations')} × {r.get('warmupTime')} warm-up, "
          f"{r.get('measurementIterations')} × {r.get('measurementTime')} measurement, {r.get('threads')} thread, "
          f"mode {r.get('mode')}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--jvm":
        jvm(sys.argv[2])
    elif len(sys.argv) == 2:
        main(sys.argv[1])
    else:
        sys.exit(__doc__)
