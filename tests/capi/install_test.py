#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`meson install` works and the C API is usable from what it installs.

Run as `install_test.py BUILD_DIR CONSUMER_C VERSION`. Installs the build
into a temporary DESTDIR, checks the header, library and CLI are there,
then compiles and links tests/capi/consumer.c
with nothing but `pkg-config --cflags --libs recsearch` (PKG_CONFIG_PATH
and PKG_CONFIG_SYSROOT_DIR pointing into the DESTDIR), checks the program
needs the library by its SONAME, and runs it.
"""

import glob
import os
import shutil
import subprocess
import sys
import tempfile


def run(cmd, **kw):
    print("+ " + " ".join(cmd), flush=True)
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def main():
    build, consumer, version = sys.argv[1:4]
    meson = shutil.which("meson")
    if meson is None:
        print("meson not found on PATH")
        return 1
    problems = []
    tmp = tempfile.mkdtemp(prefix="recsearch-install-")
    try:
        dest = os.path.join(tmp, "dest")
        run([meson, "install", "-C", build, "--no-rebuild", "--quiet", "--destdir", dest])
        pcs = glob.glob(os.path.join(dest, "**", "pkgconfig", "recsearch.pc"), recursive=True)
        if len(pcs) != 1:
            print("FAIL: expected one installed recsearch.pc, found %s" % pcs)
            return 1
        pc = pcs[0]
        headers = glob.glob(os.path.join(dest, "**", "include", "recsearch", "recsearch.h"),
                            recursive=True)
        if len(headers) != 1:
            problems.append("recsearch.h not installed under include/recsearch")
        libs = glob.glob(os.path.join(dest, "**", "librecsearch.so.*"), recursive=True)
        if not libs:
            problems.append("librecsearch.so.* not installed")
        # The CLI, when this build has it, is installed and runs.
        if os.path.exists(os.path.join(build, "tools", "recsearch", "recsearch")):
            clis = glob.glob(os.path.join(dest, "**", "bin", "recsearch"), recursive=True)
            if len(clis) != 1:
                problems.append("the recsearch CLI is not installed under bin/")
            else:
                out = run([clis[0], "--version"]).stdout
                if version not in out:
                    problems.append("installed CLI --version says %r" % out)

        env = dict(os.environ)
        env["PKG_CONFIG_PATH"] = os.path.dirname(pc)
        env["PKG_CONFIG_SYSROOT_DIR"] = dest
        flags = run(["pkg-config", "--cflags", "--libs", "recsearch"], env=env).stdout.split()
        modversion = run(["pkg-config", "--modversion", "recsearch"], env=env).stdout.strip()
        if modversion != version:
            problems.append("pkg-config --modversion gives %s, expected %s" % (modversion, version))
        libdirs = [f[2:] for f in flags if f.startswith("-L")]
        incdirs = [f[2:] for f in flags if f.startswith("-I")]
        if not libdirs or not all(d.startswith(dest) and os.path.isdir(d) for d in libdirs):
            problems.append("pkg-config -L flags do not point into the install: %s" % flags)
        if not all(d.startswith(dest) and os.path.isdir(d) for d in incdirs):
            problems.append("pkg-config -I flags do not point into the install: %s" % flags)

        exe = os.path.join(tmp, "consumer")
        cc = os.environ.get("CC", "cc")
        run([cc, "-std=c99", "-Wall", "-Wextra", "-pedantic", "-Werror", consumer, "-o", exe]
            + flags + ["-lm"])
        needed = run(["readelf", "-d", exe]).stdout
        if "[librecsearch.so." not in needed:
            problems.append("the program does not need librecsearch.so.<major>:\n" + needed)
        env_run = dict(os.environ)
        env_run["LD_LIBRARY_PATH"] = os.pathsep.join(libdirs)
        out = run([exe, version], env=env_run).stdout
        print(out, end="")
        if not out.startswith("consumer ok: " + version):
            problems.append("unexpected consumer output: " + out)
        resolved = run(["ldd", exe], env=env_run).stdout
        if not any("librecsearch.so" in l and dest in l for l in resolved.splitlines()):
            problems.append("the program did not load the installed library:\n" + resolved)
    except subprocess.CalledProcessError as e:
        problems.append("command failed (%d): %s\n%s%s" % (e.returncode, " ".join(e.cmd),
                                                             e.stdout, e.stderr))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for p in problems:
        print("FAIL: " + p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
