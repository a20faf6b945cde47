"""`python -m gb300lane.engine serve|sidecar ...`: the embedded lane engine's command line.

The same entry point backs `gb300lane engine serve|sidecar`; configuration
errors print one line and exit 1 before anything binds.
"""

from __future__ import annotations

import sys

from gb300lane.errors import EngineError

USAGE = (
    "usage: python -m gb300lane.engine serve [MODEL] --model builtin [vllm serve flags ...]\n"
    "       python -m gb300lane.engine sidecar --host 127.0.0.1 --port P\n"
)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        sys.stdout.write(USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    try:
        if command == "serve":
            from gb300lane.engine.args import parse_serve_args
            from gb300lane.engine.server import serve

            serve(parse_serve_args(rest))
        elif command == "sidecar":
            from gb300lane.engine.args import parse_sidecar_args
            from gb300lane.engine.sidecar import serve_sidecar

            host, port, extra = parse_sidecar_args(rest)
            for flag in extra:
                print(f"WARNING sidecar: {flag}: accepted and ignored by the sidecar stand-in", flush=True)
            serve_sidecar(host, port)
        else:
            sys.stderr.write(f"error: unknown command {command!r}\n{USAGE}")
            return 2
    except EngineError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
