"""``python -m standin --host 127.0.0.1 --port 8765``: serve until SIGTERM or SIGINT."""

import argparse
import signal
import sys
import threading

from standin.server import start_in_thread


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m standin", description="Stand-in external destination.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765, help="0 picks a free port (printed on start)")
    parser.add_argument("--verbose", action="store_true", help="log every request to stderr")
    args = parser.parse_args(argv)

    # Handlers go in before the socket opens, so a signal sent right after the ready line is not lost.
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())

    try:
        server, base_url = start_in_thread(args.host, args.port, verbose=args.verbose)
    except OSError as error:
        print(f"standin: cannot listen on {args.host}:{args.port}: {error}", file=sys.stderr)
        return 2
    print(f"standin listening on {base_url}", flush=True)
    stop.wait()
    server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
