"""The checkpoints the tests load: the embedded default is the trained dice-tiny model (22M parameters, slow to decode
on a CPU), so tests of plumbing decode with the untrained stand-in below instead (random weights, 1.7 MB, built by
`python -m dice_copilot.model.build_untrained_checkpoint --out tests/fixtures/untrained_checkpoint`)."""

from pathlib import Path

UNTRAINED_CHECKPOINT = Path(__file__).parent / "fixtures" / "untrained_checkpoint"
