#!/usr/bin/env bash
# Exports the configs of a suite run twice, once from a past commit's
# templates and once from today's, into one plan for bench/sdpa_compare.py:
# the dense kernels of then and now timed side by side in one process (the
# "no regression" check of a change to the templates). Runs on any machine
# with export_kernel (NVRTC needs no GPU); the plan runs on the GPU.
#
#   [ONLY="NAME ..."] bench/kernels_then_and_now.sh BIN_DIR COMMIT OUT_DIR \
#     RUN.json...
#   python3 bench/sdpa_compare.py OUT_DIR/plan.json --interleave --rounds 5
#
# BIN_DIR holds export_kernel; ONLY keeps the runs' rows of those names.
# RUN.json: sdpa_compare.py runs whose results name template, config and
# problem (the suite's, e.g. bench/results/*_suite-part*.json). A past
# template is its .cu at COMMIT with that commit's shared headers inlined,
# compiled against today's launch struct (common/attention_params.cuh, a
# superset of the fields past templates read) through export_kernel
# --source, so both kernels run through today's runtime and launch
# geometry. Entries: "NAME then" and "NAME now".
set -euo pipefail
bin=$1 commit=$2 out=$3
shift 3
root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
mkdir -p "$out"

# The source of TEMPLATE at COMMIT as one file.
past_source() {
  local template=$1 file=$2 header
  inline() {
    git -C "$root" show "$commit:kernel_templates/common/$1" |
      grep -v '^#include "'
  }
  {
    echo '#include "attention_params.cuh"'
    # The commit's shared headers, each after those it includes.
    for header in dtype.cuh sequence.cuh fp8.cuh flash_common.cuh; do
      if git -C "$root" cat-file -e \
        "$commit:kernel_templates/common/$header" 2>/dev/null; then
        inline "$header"
      fi
    done
    local body
    body=$(git -C "$root" show "$commit:kernel_templates/$template/$template.cu")
    if [[ $body == *'#include "hopper.cuh"'* ]]; then inline hopper.cuh; fi
    grep -v '^#include "' <<<"$body"
  } >"$file"
}

python3 - "$@" >"$out/rows.txt" <<'EOF'
import json, os, sys
only = os.environ.get("ONLY", "").split()
for run in sys.argv[1:]:
    for r in json.load(open(run))["results"]:
        name = r["name"].replace(" ", "_")
        if not only or name in only:
            print(name, r["template"], r["config"], r["problem"])
EOF

plan=()
while read -r name template config problem; do
  [ -f "$out/$template.then.cu" ] ||
    past_source "$template" "$out/$template.then.cu"
  for when in "then" "now"; do
    source_flag=()
    [ "$when" = "then" ] && source_flag=(--source="$out/$template.then.cu")
    "$bin/export_kernel" --template_name="$template" --config="$config" \
      --problem="$problem" --out="$out/${name}_$when" "${source_flag[@]}" \
      >/dev/null
    plan+=("{\"name\": \"$name $when\", \"bundle\": \"$out/${name}_$when.evtb\", \"problem\": \"$problem\"}")
  done
  echo "$name: $template $config"
done <"$out/rows.txt"
(IFS=,; echo "[${plan[*]}]") | python3 -m json.tool >"$out/plan.json"
echo "plan: $out/plan.json (${#plan[@]} kernels)"
