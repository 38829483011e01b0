#!/usr/bin/env bash
# Validator time-to-verdict A/B on one machine: this tree against an older checkout, alternated, so that a change
# to the validator can be told apart from a slower machine (cold verdicts are g++ runs, which move with the host's
# load). Each run is `bench/validator_bench.py --parts ours`, cold: a fresh build cache holding only the one-time
# setup (precompiled headers, prebuilt glues), built once per tree before the rounds and not timed. From the repo
# root (on the GPU machine after `source bench/device_setup.sh`, with the old tree carried):
#   git archive OLD_COMMIT | tar -x -C .old      # once (add /.old/ to .git/info/exclude; carry .old)
#   bash bench/validator_ab.sh [.old] [rounds]
# About 6 minutes for 2 rounds on the one-GPU H200 machine. JSON per run lands in $OUT, one summary line per run.
# Without a GPU the verdicts are compile-only, which times the same builds.
set -uo pipefail
old=${1:-.old}
rounds=${2:-2}
out=${OUT:-/tmp/validator_ab}
mkdir -p "$out" /tmp/oldshim/dice_copilot
cp -r "$old"/dice_copilot/* /tmp/oldshim/dice_copilot/
for d in model validator server trainer; do ln -sfn "$(cd "$old" && pwd)/$d" "/tmp/oldshim/dice_copilot/$d"; done
setup='import sys
from dice_copilot.validator.compile import CompileConfig, ExtensionBuilder
print("setup", sys.argv[1], ExtensionBuilder(CompileConfig(cache_dir=sys.argv[1])).prepare_common_headers())'
summary='import json, statistics, sys
run = json.load(open(sys.argv[1]))
cold = [row["cold_s"] for row in run["ours"]]
host = [row["breakdown"]["cold"]["unit_seconds"][0].get("host.cpp", 0.0) for row in run["ours"]]
warm, infill = (statistics.median(row[k] for row in run["ours"]) for k in ("warm_s", "infill_s"))
print("%s: cold median %.2f s (%.2f-%.2f), host unit %.2f s, warm %.3f s, infill %.3f s"
      % (sys.argv[2], statistics.median(cold), min(cold), max(cold), statistics.median(host), warm, infill))'

in_tree() {  # tree, then a command run from it with its own package
    if [ "$1" = new ]; then (shift; "$@"); else (cd "$old" && shift && PYTHONPATH=/tmp/oldshim:${PYTHONPATH:-} "$@"); fi
}
for tree in new old; do
    rm -rf "/tmp/validator_ab_$tree.setup"
    in_tree $tree timeout 400 python3 -c "$setup" "/tmp/validator_ab_$tree.setup" \
        || { echo "one-time setup of the $tree tree failed or ran past 400 s" >&2; exit 1; }
done
for round in $(seq "$rounds"); do
    for tree in new old; do
        rm -rf /tmp/validator_ab_run && cp -a "/tmp/validator_ab_$tree.setup" /tmp/validator_ab_run
        in_tree $tree timeout 200 python3 bench/validator_bench.py --parts ours --cache /tmp/validator_ab_run \
            --out "$out/ours_${tree}_$round.json" >"$out/ours_${tree}_$round.log" 2>&1
        python3 -c "$summary" "$out/ours_${tree}_$round.json" "$tree round $round" \
            || tail -5 "$out/ours_${tree}_$round.log"
    done
done
