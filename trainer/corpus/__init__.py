"""The pretraining corpus: permissively licensed CUDA, C++ and Python source from what the machine has installed and
from pinned source distributions, deduplicated, with a manifest that makes it rebuildable."""
