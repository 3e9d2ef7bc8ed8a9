# Prints a bench engine JSON report's batch-1 tok/s rows (with their
# ratios) per scenario, and the notes that contain any of the words given
# after the file: what the MoE device scripts read back.
#   python3 lab/moe/tps.py moe.json ["read in place" ...]
import json, sys

words = sys.argv[2:]
for s in json.load(open(sys.argv[1]))["scenarios"]:
    print(s["variant"])
    for m in s["metrics"]:
        if m["unit"] == "tok/s" and "b8" not in m["key"]:
            r = m.get("ratio") or {}
            print("  %-44s %8.2f  %s" % (m["key"], m["value"], ("%.3fx %s" % (r["value"], r["basis"])) if r else ""))
    for n in s.get("notes", []):
        if any(w in n for w in words):
            print("  note:", n[:300])
