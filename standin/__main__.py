"""``python -m standin --host 127.0.0.1 --port 8765 [--store FILE]``: serve until SIGTERM or SIGINT."""

import argparse
import os
import signal
import sqlite3
import sys
import threading

from standin.server import start_in_thread


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m standin", description="Stand-in external destination.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765, help="0 picks a free port (printed on start)")
    parser.add_argument("--verbose", action="store_true", help="log every request to stderr")
    parser.add_argument(
        "--store",
        default=os.environ.get("STANDIN_STORE") or None,
        help="a SQLite file the records are kept in across restarts (default: $STANDIN_STORE; none: in memory)",
    )
    args = parser.parse_args(argv)

    # Handlers go in before the socket opens, so a signal sent right after the ready line is not lost.
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())

    try:
        server, base_url = start_in_thread(args.host, args.port, verbose=args.verbose, store_path=args.store)
    except OSError as error:
        print(f"standin: cannot listen on {args.host}:{args.port}: {error}", file=sys.stderr)
        return 2
    except sqlite3.Error as error:
        print(f"standin: cannot use the record file {args.store}: {error}", file=sys.stderr)
        return 2
    # The ready line first and alone: tests and the bench read the URL off its end.
    print(f"standin listening on {base_url}", flush=True)
    print(
        f"records kept in {args.store}" if args.store else "records in memory only (--store FILE keeps them)",
        flush=True,
    )
    stop.wait()
    server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
