#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""recsearch works as a Meson subproject: dependency('recsearch-c') and
dependency('recsearch') resolve through meson.override_dependency.

Run as `subproject_test.py SOURCE_ROOT CONSUMER_C`. Configures (does not
build: that would compile the whole library again) a small outer C project
whose subprojects/recsearch is this source tree.
"""

import os
import shutil
import subprocess
import sys
import tempfile

OUTER = """project('uses-recsearch', 'c', 'cpp', default_options : ['c_std=c99', 'cpp_std=c++20'])
opts = ['tests=false', 'benchmarks=false', 'cli=disabled']
rs_c = dependency('recsearch-c', fallback : 'recsearch', default_options : opts)
rs_cpp = dependency('recsearch', fallback : 'recsearch', default_options : opts)
executable('consumer', 'consumer.c',
           dependencies : [rs_c, meson.get_compiler('c').find_library('m')])
"""


def main():
    source, consumer = sys.argv[1:3]
    meson = shutil.which("meson")
    if meson is None:
        print("meson not found on PATH")
        return 1
    tmp = tempfile.mkdtemp(prefix="recsearch-subproject-")
    try:
        os.makedirs(os.path.join(tmp, "subprojects"))
        os.symlink(os.path.abspath(source), os.path.join(tmp, "subprojects", "recsearch"))
        shutil.copy(consumer, os.path.join(tmp, "consumer.c"))
        with open(os.path.join(tmp, "meson.build"), "w", encoding="utf-8") as f:
            f.write(OUTER)
        p = subprocess.run([meson, "setup", os.path.join(tmp, "build"), tmp],
                           capture_output=True, text=True)
        print(p.stdout[-3000:], p.stderr[-3000:])
        problems = []
        if p.returncode != 0:
            problems.append("meson setup of the outer project failed (%d)" % p.returncode)
        for dep in ("recsearch-c", "recsearch"):
            if "Dependency %s found: YES" % dep not in p.stdout:
                problems.append("dependency('%s') did not resolve from the subproject" % dep)
        for prob in problems:
            print("FAIL: " + prob)
        return 1 if problems else 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
