"""`dice-copilot serve`: run the language server over stdio (editors) or TCP (debugging)."""

from __future__ import annotations

import argparse
import logging


def serve(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING if not args.verbose else logging.DEBUG,
                        format="dice-copilot %(levelname)s %(name)s: %(message)s")
    if not args.verbose:
        # Errors a handler returns to the client (bad params, missing get_inputs) are not server faults.
        logging.getLogger("pygls.protocol.json_rpc").setLevel(logging.CRITICAL)
    from dice_copilot.server.server import server

    try:
        if args.tcp is not None:
            server.start_tcp(args.host, args.tcp)
        else:
            server.start_io()
    finally:
        server.shutdown_services()
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "serve", help="run the DICE Copilot language server",
        description="Run the language server. Editors start it over stdio; --tcp PORT listens on a socket instead "
                    "(attach a client to debug it). Settings (checkpoint, device, budgets, validation) come from the "
                    "editor through the diceCopilot settings section.")
    parser.add_argument("--stdio", action="store_true", help="talk over stdin/stdout (the default)")
    parser.add_argument("--tcp", type=int, metavar="PORT", help="listen on this TCP port instead of stdio")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind with --tcp (default 127.0.0.1)")
    parser.add_argument("--verbose", action="store_true", help="debug logging of the protocol to stderr")
    parser.set_defaults(run=serve)
