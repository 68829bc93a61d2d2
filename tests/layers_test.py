"""Dependencies point down only: no file of a layer includes a header of a
layer above it. Each row names a folder and the folders of ours it may
include (besides its own and the generated protobuf headers, evotune/).

    python3 tests/layers_test.py SOURCE_DIR
"""
import os
import re
import sys
import unittest

ROOT = sys.argv.pop(1) if len(sys.argv) > 1 else "."
OURS = ("core", "kernel_templates", "launch", "storage", "tuner", "runtime")
# Folder -> the folders below it that it may include.
ALLOWED = {
    "core": [],
    "kernel_templates": ["core"],
    "storage": ["core"],
    "launch": ["core", "kernel_templates"],
    "tuner/common": [],
    "tuner/search": ["core"],
    "tuner/evaluator": ["core", "kernel_templates", "launch", "tuner/common"],
    "tuner/model": ["core", "kernel_templates", "tuner/evaluator"],
    "tuner/wire": ["core", "kernel_templates", "tuner/common"],
    "runtime": ["core", "kernel_templates", "launch", "tuner/common",
                "tuner/wire"],
    "tuner/jobs": ["core", "kernel_templates", "launch", "storage",
                   "tuner/common", "tuner/search", "tuner/evaluator",
                   "tuner/model", "tuner/wire"],
    "tuner/serving": ["core", "kernel_templates", "launch", "storage",
                      "tuner/common", "tuner/search", "tuner/evaluator",
                      "tuner/model", "tuner/wire", "tuner/jobs"],
    "tuner/daemon": ["core", "kernel_templates", "launch", "storage",
                     "tuner/common", "tuner/search", "tuner/evaluator",
                     "tuner/model", "tuner/wire", "tuner/jobs",
                     "tuner/serving"],
    "tuner/worker": ["core", "kernel_templates", "launch", "tuner/common",
                     "tuner/evaluator", "tuner/wire"],
    "tuner/cli": ["core", "tuner/common", "tuner/search", "tuner/wire"],
    # What a user copies: the public headers (evotune/) only.
    "runtime/examples": [],
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def folder_of(header):
    """The layer a header of ours belongs to, or None (not ours)."""
    if not header.startswith(OURS):
        return None
    best = None
    for layer in ALLOWED:
        if header.startswith(layer + "/") and (best is None or
                                               len(layer) > len(best)):
            best = layer
    return best or header.split("/")[0]


def sources(layer):
    """The files of `layer`, less those of the layers inside it."""
    inner = tuple(other + "/" for other in ALLOWED
                  if other.startswith(layer + "/"))
    for base, _, files in os.walk(os.path.join(ROOT, layer)):
        rel = os.path.relpath(base, ROOT)
        if (rel + "/").startswith(inner):
            continue
        for f in files:
            if f.endswith((".h", ".cc", ".cuh", ".cu")):
                yield os.path.join(base, f)


class LayersTest(unittest.TestCase):
    def test_includes_point_down_only(self):
        wrong = []
        for layer, below in ALLOWED.items():
            for path in sources(layer):
                with open(path) as f:
                    headers = INCLUDE.findall(f.read())
                for header in headers:
                    target = folder_of(header)
                    if target and target != layer and target not in below:
                        wrong.append(f"{os.path.relpath(path, ROOT)} "
                                     f"includes {header}")
        self.assertEqual(wrong, [])

    def test_every_folder_of_ours_is_a_layer(self):
        for top in OURS:
            self.assertTrue(os.path.isdir(os.path.join(ROOT, top)), top)


if __name__ == "__main__":
    unittest.main()
