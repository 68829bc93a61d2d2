#!/usr/bin/env bash
# docs/extending.md's "Add a template", end to end (ctest label "build"): on a copy of
# the source tree, runs step 1 exactly as docs/extending.md writes it, builds, and
# checks that the new template is registered and compiles (NVRTC, no GPU
# needed); then that a folder without its spec fails the build, and that
# removing the new folder removes the template from the rebuilt binary.
#
#   add_template_test.sh SOURCE_DIR
set -euo pipefail
src=$(cd "$1" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

tar -C "$src" --exclude='./build*' --exclude=./.git --exclude=./gpu -cf - . |
  tar -C "$work" -xf -
cd "$work"
# Step 1: the shell block of docs/extending.md's "Add a template" section.
awk '/^## Add a template/ {on = 1; next} /^## / {on = 0} on' docs/extending.md |
  awk '/^ *```sh/ {c = 1; next} /^ *```/ {c = 0} c' >step1.sh
[ -s step1.sh ] || fail "docs/extending.md has no shell block under 'Add a template'"
bash -e step1.sh
[ -f kernel_templates/my_attention/my_attention.cu ] || fail "no my_attention.cu"

build() { cmake --build build --target export_kernel >build.log 2>&1; }
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Debug >configure.log 2>&1 ||
  { cat configure.log; fail "configure"; }
build || { tail -30 build.log; fail "build with the new template"; }
export_kernel() {
  build/bin/export_kernel --template_name=my_attention \
    --config=KV_TILE=64,WARPS=4 --problem=b1_h8_kv8_q512_k512_d64_full_fp16_bhsd \
    --arch=sm_80 --out="$work/k"
}
export_kernel || fail "export_kernel does not know my_attention"
[ -s "$work/k.evtb" ] || fail "no kernel bundle for my_attention"
grep -q my_attention "$work/k.evtb" || fail "the bundle does not name my_attention"

# A folder without its spec fails the build, saying what is missing.
mkdir kernel_templates/half_done
cp kernel_templates/naive/naive.cu kernel_templates/half_done/half_done.cu
if build; then fail "a template folder without a spec built"; fi
grep -q "must hold half_done.cu and half_done_spec.cc" build.log ||
  { tail -30 build.log; fail "no clear message for the missing spec"; }
rm -r kernel_templates/half_done

# Removing the folder removes the template (no stale embedded copy).
rm -r kernel_templates/my_attention
build || { tail -30 build.log; fail "build after removing the template"; }
if export_kernel 2>/dev/null; then fail "my_attention still embedded"; fi
echo "add a template: passed"
