#!/usr/bin/env python3
"""Every tracked source file names its licence on its first lines
(SPDX-License-Identifier: Apache-2.0, see LICENSE).

    tools/spdx.py --check   # exit 1 listing the files without it (a test)
    tools/spdx.py --add     # adds it where it is missing

C and C++ files get a `//` line (`/* */` in .c and .h, which C99 users
compile), scripts and Meson files a `#` line after any shebang.
Standard library only.
"""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TAG = "SPDX-License-Identifier: Apache-2.0"
SLASH = (".cpp", ".hpp", ".cu", ".cuh")
BLOCK = (".c", ".h", ".h.in")
HASH = (".py", ".sh")


def style(path):
    name = os.path.basename(path)
    if name in ("meson.build", "meson_options.txt", "meson.options") or name.endswith(HASH):
        return "# " + TAG
    if name.endswith(SLASH):
        return "// " + TAG
    if name.endswith(BLOCK):
        return "/* " + TAG + " */"
    if path.startswith(".ci/") or path.startswith("tools/") and "." not in name:
        return "# " + TAG  # extensionless scripts
    return None


def tracked():
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.split("\n")
    for p in out:
        if not p or p.startswith("subprojects/") or "/corpus" in p or p.startswith("data/"):
            continue
        if os.path.isfile(os.path.join(ROOT, p)) and style(p):
            yield p


def has_tag(text):
    return TAG in "\n".join(text.split("\n")[:3])


def add(path):
    full = os.path.join(ROOT, path)
    with open(full) as f:
        text = f.read()
    if has_tag(text):
        return False
    line = style(path)
    if text.startswith("#!"):
        first, _, rest = text.partition("\n")
        text = first + "\n" + line + "\n" + rest
    else:
        text = line + "\n" + text
    with open(full, "w") as f:
        f.write(text)
    return True


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "--check"
    missing = []
    for p in tracked():
        if mode == "--add":
            if add(p):
                print("added:", p)
        else:
            with open(os.path.join(ROOT, p)) as f:
                if not has_tag(f.read(4096)):
                    missing.append(p)
    if missing:
        print("files without '%s' on their first lines:" % TAG)
        for p in missing:
            print("  " + p)
        print("run tools/spdx.py --add")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
