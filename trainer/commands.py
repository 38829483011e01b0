"""The `dice-copilot train ...` command group: each trainer module listed here adds its own subcommand."""

import importlib

# Each module exposes `register_train(train_subparsers)`, adding one `train <name>` subcommand with
# `set_defaults(run=fn)`; `fn(args) -> int` is the exit code.
TRAIN_MODULES = [
    "dice_copilot.trainer.tokenizer_training",
    "dice_copilot.trainer.sft",
    "dice_copilot.trainer.rl",
    "dice_copilot.trainer.cuke.commands",
    "dice_copilot.trainer.corpus.commands",
]


def register(subparsers) -> None:
    """Add the `train` group to the top-level CLI."""
    parser = subparsers.add_parser("train", help="build checkpoints: tokenizer, CuKe data, SFT, RL")
    train_subparsers = parser.add_subparsers(dest="train_command", metavar="STAGE")

    def show_help(args) -> int:
        parser.print_help()
        return 2

    parser.set_defaults(run=show_help)
    for name in TRAIN_MODULES:
        importlib.import_module(name).register_train(train_subparsers)


def add_config_command(train_subparsers, name: str, help: str, description: str, config_class: str, example: str,
                       run) -> None:
    """`train NAME CONFIG [--set KEY=VALUE ...]`: a run described by a TOML or YAML file of `config_class` fields."""
    parser = train_subparsers.add_parser(name, help=help, description=description)
    parser.add_argument("config", metavar="CONFIG", help=f"TOML or YAML file overriding the {config_class} defaults")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help=f"override one config field (repeatable), e.g. --set {example}")
    parser.set_defaults(run=run)
