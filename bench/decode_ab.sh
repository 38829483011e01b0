#!/usr/bin/env bash
# Decode bench A/B on one machine start: this tree against an older checkout, alternated, so that a change to the
# engine can be shown not to slow the forward (machine starts differ by up to ~0.05 ms). On the GPU machine, after
# `source bench/device_setup.sh`, with the old tree carried:
#   git archive OLD_COMMIT | tar -x -C .old      # here, once (add /.old/ to .git/info/exclude; carry .old)
#   bash bench/decode_ab.sh [.old] [rounds]
# Each run is bench/decode.py's batch-1 forward at the DICE-1.7B shape, median of 5 captures; JSON lands in $OUT.
set -uo pipefail
old=${1:-.old}
rounds=${2:-2}
out=${OUT:-/tmp/decode_ab}
mkdir -p "$out" /tmp/oldshim/dice_copilot
cp -r "$old"/dice_copilot/* /tmp/oldshim/dice_copilot/
for d in model validator server trainer; do ln -sfn "$(cd "$old" && pwd)/$d" "/tmp/oldshim/dice_copilot/$d"; done
args=(--batches '' --skip large,plain,reference,eager,attention,separate,cublas,chain,compiled --repeats 5)
for round in $(seq "$rounds"); do
    echo "== this tree, round $round"
    timeout 150 python3 bench/decode.py --out "$out/decode_new_$round.json" "${args[@]}" 2>&1 | grep "forward at batch"
    echo "== $old, round $round"
    (cd "$old" && PYTHONPATH=/tmp/oldshim:${PYTHONPATH:-} timeout 150 python3 bench/decode.py \
        --out "$out/decode_old_$round.json" "${args[@]}" 2>&1 | grep "forward at batch")
done
