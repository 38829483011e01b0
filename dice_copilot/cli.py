"""The `dice-copilot` command line: one subcommand per feature, registered by the folder that owns it."""

import argparse
import importlib
import sys

# Each module exposes `register(subparsers)`, adding its subcommands with `set_defaults(run=fn)`;
# `fn(args) -> int` is the exit code.
COMMAND_MODULES = [
    "dice_copilot.model.commands",
    "dice_copilot.validator.commands",
    "dice_copilot.trainer.commands",
    "dice_copilot.server.commands",
    "dice_copilot.validator.eval_commands",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dice-copilot",
        description="Validated CUDA kernel suggestions from a DICE block-diffusion LLM.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "run"):
        parser.print_help()
        return 2
    try:
        return args.run(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
