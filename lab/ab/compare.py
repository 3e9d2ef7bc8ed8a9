"""Compares old-N.json and new-N.json reports of `strata bench engine`:
per scenario and metric present in both, the median of each side and new/old."""
import glob, json, os, statistics, sys

d = sys.argv[1]

def load(side):
    runs = []
    for p in sorted(glob.glob(os.path.join(d, side + "-*.json"))):
        with open(p) as f:
            runs.append(json.load(f))
    return runs

def values(runs):
    out = {}
    for r in runs:
        for s in r.get("scenarios", []):
            for m in s.get("metrics", []):
                v = m.get("value")
                if isinstance(v, (int, float)):
                    out.setdefault((s["scenario"], m["key"], m.get("unit", "")), []).append(v)
    return out

old, new = values(load("old")), values(load("new"))
print(f"{'scenario':10} {'metric':44} {'unit':8} {'old (median)':>14} {'new (median)':>14} {'new/old':>8}  n")
for k in sorted(set(old) & set(new)):
    o, n = statistics.median(old[k]), statistics.median(new[k])
    ratio = n / o if o else float("nan")
    print(f"{k[0]:10} {k[1]:44} {k[2]:8} {o:14.4g} {n:14.4g} {ratio:8.3f}  {len(old[k])}/{len(new[k])}")
for k in sorted(set(old) ^ set(new)):
    print("only in", "old" if k in old else "new", k)
