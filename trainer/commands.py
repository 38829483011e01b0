"""The `dice-copilot train ...` command group: tokenizer, CuKe data, pretraining corpus, SFT, RL and whole recipes."""

import importlib

# Modules that import nothing heavy add their own subcommand: each exposes `register_train(train_subparsers)`,
# adding one `train <name>` subcommand with `set_defaults(run=fn)`; `fn(args) -> int` is the exit code.
TRAIN_MODULES = [
    "dice_copilot.trainer.tokenizer_training",
    "dice_copilot.trainer.cuke.commands",
    "dice_copilot.trainer.corpus.commands",
    "dice_copilot.trainer.recipe",
]

MULTI_GPU_HINT = ("For several GPUs run it under `accelerate launch --config_file "
                  "trainer/accelerate_configs/<setup>.yaml -m dice_copilot.cli`.")


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
    # sft and rl import torch when loaded, so their commands are declared here and load them only to run.
    add_config_command(
        train_subparsers, "sft", help="block-diffusion SFT (from scratch or from a SDAR/DICE/Qwen3 checkpoint)",
        description="Block-diffusion SFT. CONFIG is a TOML or YAML file of SFTConfig fields (see "
                    "dice_copilot/trainer/sft_config.py). " + MULTI_GPU_HINT,
        config_class="SFTConfig", example="max_steps=100", run=_run_later("dice_copilot.trainer.sft", "run_train_sft"),
    )
    add_config_command(
        train_subparsers, "rl", help="BiC-RL: TraceRL with execution rewards (stage 1 infill, stage 2 end-to-end)",
        description="BiC-RL on a block-diffusion checkpoint. CONFIG is a TOML or YAML file of RLConfig fields (see "
                    "dice_copilot/trainer/rl_config.py; DICE's two stages in trainer/rl_configs/). " + MULTI_GPU_HINT,
        config_class="RLConfig", example="rl_steps=10", run=_run_later("dice_copilot.trainer.rl", "run_train_rl"),
    )


def add_config_command(train_subparsers, name: str, help: str, description: str, config_class: str, example: str,
                       run) -> None:
    """`train NAME CONFIG [--set KEY=VALUE ...]`: a run described by a TOML or YAML file of `config_class` fields."""
    parser = train_subparsers.add_parser(name, help=help, description=description)
    parser.add_argument("config", metavar="CONFIG", help=f"TOML or YAML file overriding the {config_class} defaults")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help=f"override one config field (repeatable), e.g. --set {example}")
    parser.set_defaults(run=run)


def _run_later(module: str, function: str):
    """A run function that imports `module` only when the command runs."""

    def run(args) -> int:
        return getattr(importlib.import_module(module), function)(args)

    return run
