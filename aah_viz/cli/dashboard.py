"""``aah-viz dashboard``: start the routing dashboard (Streamlit) on a logs root."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from aah_viz.errors import ConfigError, RunLogError


def app_path() -> Path:
    """The Streamlit entry point, inside the installed package."""
    import aah_viz.dashboard

    return Path(aah_viz.dashboard.__file__).resolve().parent / "app.py"


def streamlit_command(logs: Path, port: int, address: str, reference: Path | None) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(app_path()),
        "--server.headless",
        "true",
        "--server.address",
        address,
        "--server.port",
        str(port),
        "--browser.gatherUsageStats",
        "false",
        "--server.fileWatcherType",
        "none",  # serving, not developing: no reload on source edits
        "--client.toolbarMode",
        "viewer",  # a user's tool: no "Deploy" button or developer menu
        "--",
        "--logs",
        str(logs),
    ]
    if reference is not None:
        cmd += ["--reference", str(reference)]
    return cmd


def check_serving(address: str, port: int) -> None:
    """One line for a port outside 1..65535 or an address this machine cannot serve on (before Streamlit starts)."""
    import socket

    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ConfigError(f"--port {port}: a TCP port is a whole number from 1 to 65535")
    if not address or len(address) > 253:
        raise ConfigError(f"--address {address[:60]!r}: give an IP address or a host name such as 127.0.0.1")
    try:
        infos = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICSERV)
        family, kind, proto, _, where = infos[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(where)
    except (OSError, UnicodeError, ValueError) as err:
        raise ConfigError(
            f"--address {address[:60]} --port {port}: cannot serve there ({type(err).__name__}: "
            f"{str(err)[:80]}); give an address of this machine (127.0.0.1) and a free port"
        ) from None


def run(args) -> int:
    from aah_viz.dashboard import config

    check_serving(args.address, args.port)
    logs = Path(args.logs).expanduser().resolve() if args.logs else config.default_logs_root()
    if not logs.is_dir():
        raise RunLogError(f"logs root {logs} is not a folder; give --logs DIR, a folder holding run directories")
    reference = Path(args.reference).expanduser().resolve() if args.reference else config.default_reference_dir()
    if args.reference and not reference.is_dir():
        raise RunLogError(
            f"reference folder {reference} does not exist; give --reference DIR (the reference's paper/ CSVs)"
        )
    env = dict(os.environ)
    env[config.LOGS_ENV] = str(logs)
    if reference is not None:
        env[config.REFERENCE_ENV] = str(reference)
    cmd = streamlit_command(logs, args.port, args.address, reference)
    print(f"aah-viz dashboard: serving {logs} at http://{args.address}:{args.port} (Ctrl+C stops it)", file=sys.stderr)
    return call_forwarding_signals(cmd, env)


def call_forwarding_signals(cmd: list[str], env: dict) -> int:
    """Run ``cmd`` and wait for it; SIGTERM, SIGINT and SIGHUP sent to this process are passed on, so a
    plain ``kill`` of ``aah-viz dashboard`` stops the server it started (no server left on the port)."""
    import signal

    child = subprocess.Popen(cmd, env=env)
    forwarded = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

    def forward(signum, frame):
        if child.poll() is None:
            child.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in forwarded}
    try:
        code = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if child.poll() is None:  # this process is leaving for another reason: never orphan the server
            child.terminate()
            child.wait()
    return 128 - code if code < 0 else code


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "dashboard",
        help="open the routing dashboard (Streamlit) on a folder of runs",
        description="Serve the routing dashboard: runs, hierarchy, windows, stability, probes, compare, export. "
        "It only opens runs under the logs root and binds 127.0.0.1 unless told otherwise.",
    )
    p.add_argument(
        "--logs",
        metavar="DIR",
        help="folder holding run directories (default: ./runs when it exists, else sample_logs/ of a checkout "
        "of the repository)",
    )
    p.add_argument("--port", type=int, default=8501, metavar="N", help="TCP port to serve on (default 8501)")
    p.add_argument(
        "--address",
        default="127.0.0.1",
        metavar="A",
        help="address to bind (default 127.0.0.1; 0.0.0.0 exposes it to the network)",
    )
    p.add_argument(
        "--reference",
        metavar="DIR",
        help="folder of the reference's published CSVs for the Compare page "
        "(default: the paper's numbers that ship with aah-viz)",
    )
    p.set_defaults(func=run)
