#!/bin/bash
# Reference solution: compute both reports with the Python standard library.
set -euo pipefail
python3 - <<'PY'
import collections, csv, json, os

rows = list(csv.DictReader(open("/app/data/sales.csv")))
revenue = lambda r: int(r["units"]) * float(r["unit_price"])
by_region, by_month, units = collections.Counter(), collections.Counter(), collections.Counter()
for r in rows:
    by_region[r["region"]] += revenue(r)
    by_month[r["date"][:7]] += revenue(r)
    units[r["product"]] += int(r["units"])
out = os.environ["REPORT_DIR"]
summary = {
    "total_revenue": round(sum(map(revenue, rows)), 2),
    "by_region": {k: round(v, 2) for k, v in sorted(by_region.items())},
    "top_product": units.most_common(1)[0][0],
}
json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=2)
with open(os.path.join(out, "by_month.csv"), "w") as fh:
    fh.write("month,revenue\n")
    for month in sorted(by_month):
        fh.write(f"{month},{by_month[month]:.2f}\n")
PY
