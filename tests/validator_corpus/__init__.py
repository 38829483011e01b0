"""The validator regression corpus: honest and wrong ModelNew files with their problems and manifest (a package,
so that bench/validator_corpus.py, a module of the same name, does not shadow it)."""
