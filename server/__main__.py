"""`python -m dice_copilot.server`: the language server over stdio (same as `dice-copilot serve`), independent of the
other areas' subcommands."""

import sys

from dice_copilot.cli import ArgumentParser
from dice_copilot.server.commands import register


def main() -> int:
    parser = ArgumentParser(prog="python -m dice_copilot.server")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["serve", *sys.argv[1:]])
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
