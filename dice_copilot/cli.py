"""The `dice-copilot` command line: one subcommand per feature, registered by the folder that owns it.

Building the parser imports only the `commands` modules, which import nothing heavy (no torch, no model code), so
`--help` and argument errors answer at once; each command's run function imports what it needs when it runs.
"""

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

# Bad command-line input, as argparse itself exits for it.
EXIT_USAGE = 2


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """Ends every option's help with its default, unless the help already says it ("(default: ...)" in the text,
    for defaults that depend on something) or there is none to say (no value, a flag that is off, an empty list)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if ("(default" in text or not action.option_strings or default is None or default is False
                or default == [] or default is argparse.SUPPRESS):
            return text
        return f"{text} (default: %(default)s)"


class ArgumentParser(argparse.ArgumentParser):
    """The parser of every `dice-copilot` command; subcommands inherit its class and so its help formatter."""

    def __init__(self, *args, formatter_class=DefaultsHelpFormatter, **kwargs):
        super().__init__(*args, formatter_class=formatter_class, **kwargs)


def positive_int(text: str) -> int:
    """argparse type for counts that must be at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
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
        return EXIT_USAGE
    try:
        return args.run(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
