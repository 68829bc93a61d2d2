#!/usr/bin/env bash
# On a GPU machine: measures every feasible config of a template on every
# problem of a benchmark suite (exhaustive jobs through evotuned) and writes
# one CSV of the whole landscape, for replay by search tests and benchmarks.
#
#   bench/record_landscapes.sh BUNDLE SHAPES_JSON OUT_CSV COMMIT [TEMPLATE]
#
# PROBLEMS (a comma-separated list of suite names) restricts the suite.
set -uo pipefail
b=$1
shapes=$2
out=$3
commit=$4
template=${5:-flash_fwd}
work=$(mktemp -d)

"$(dirname "$0")/exhaustive_suite.sh" "$b" "$shapes" "$work/db" "$template"

gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)
# Compute capability, multiprocessors and shared memory per block, as the
# workers report them to the daemon (replays take the limits from here).
device=$("$b/run" evotune-worker --describe --cache_dir=none) || {
  echo "record_landscapes: evotune-worker --describe failed" >&2
  exit 1
}
python3 - "$work/db" "$shapes" "$out" "$gpu" "$commit" "$template" "$device" <<'PY'
import csv, datetime, json, sqlite3, sys
db, shapes, out, gpu, commit, template, device = sys.argv[1:]
names = {}
for p in json.load(open(shapes))["problems"]:
    key = (f"b{p['batch']}_h{p['heads']}_kv{p['kv_heads']}_q{p['seq_q']}"
           f"_k{p['seq_k']}_d{p['head_dim']}_"
           f"{'causal' if p['causal'] else 'full'}_{p['dtype']}_bhsd")
    names[key] = p["name"]
status = {1: "ok", 2: "compile_error", 3: "resource_rejected",
          4: "incorrect", 5: "timeout", 6: "crashed"}
rows = sqlite3.connect(db).execute(
    "SELECT p.key, tp.source_hash, t.config_key, t.status, t.median_us, "
    "t.min_us, t.p90_us, t.cv FROM trials t JOIN problems p ON "
    "p.id = t.problem_id JOIN templates tp ON tp.id = t.template_id "
    "WHERE tp.name = ? ORDER BY p.key, t.config_key", (template,)).fetchall()
with open(out, "w", newline="") as f:
    f.write(f"# evotune landscape: every feasible {template} config per problem\n")
    f.write(f"# gpu: {gpu}\n")
    f.writelines(f"# {line}\n" for line in device.splitlines() if line)
    f.write(f"# date: {datetime.date.today()}\n")
    f.write(f"# commit: {commit}\n# template hash: {rows[0][1] if rows else '?'}\n")
    w = csv.writer(f)
    w.writerow(["problem", "problem_key", "config", "status", "median_us",
                "min_us", "p90_us", "cv"])
    for key, _, config, st, med, mn, p90, cv in rows:
        w.writerow([names.get(key, key), key, config, status[st],
                    f"{med:.3f}", f"{mn:.3f}", f"{p90:.3f}", f"{cv:.4f}"])
print(f"{len(rows)} trials written to {out}")
PY
