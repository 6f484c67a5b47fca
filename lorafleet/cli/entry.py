"""The `lorafleet` console script and `python -m lorafleet`. Loading the CLI takes a few hundred milliseconds (more
on a busy machine); Ctrl-C meanwhile ends the command as it does at any later moment — `error: interrupted`, the
JSON error under --json, exit 130 — not with a traceback."""

from __future__ import annotations

import sys

from lorafleet.cli.failure import error_document, json_asked


def main() -> None:
    try:
        from lorafleet.cli.main import main as run
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted\n")
        if json_asked(sys.argv[1:]):
            sys.stdout.write(error_document(["interrupted"], None, 130) + "\n")
        sys.exit(130)
    run()
