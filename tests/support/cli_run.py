# SPDX-License-Identifier: Apache-2.0
"""Runs the recsearch command-line tool for the Python tests (tests/cli,
tests/onnx, tests/report): one subprocess call, its exit code and its
output as text, so that each test's own `run` only adds its checks.

Import with the folder on sys.path:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
    import cli_run
"""

import subprocess


class Result:
    """One run: the arguments, exit code, stdout and stderr."""

    def __init__(self, args, rc, out, err):
        self.args, self.rc, self.out, self.err = args, rc, out, err

    def __str__(self):
        return "recsearch %s -> %d\nstderr: %s" % (" ".join(self.args), self.rc, self.err[-2000:])


def run(exe, args, stdin=None, timeout=600):
    """Runs `exe args...` with `stdin` (str, bytes or None) as its input and
    returns a Result whose out and err are text (undecodable bytes replaced:
    a test must see what a broken output holds, not a decoding error).
    Raises subprocess.TimeoutExpired past `timeout` seconds."""
    data = stdin.encode() if isinstance(stdin, str) else stdin
    p = subprocess.run([exe] + list(args), input=data, capture_output=True, timeout=timeout)
    return Result(list(args), p.returncode, p.stdout.decode(errors="replace"),
                  p.stderr.decode(errors="replace"))
