#!/usr/bin/env bash
# The GPU work still owed, in parts that each fit one 10-minute device command. Run from the repo root on the GPU
# machine (with `.whl` carried), e.g. `bash bench/gpu_session.sh tests`; logs and JSON land in $OUT.
# Parts, in priority order:
#   tests      every `gpu`-marked test (validator + cheat suite, server, SFT, model, CuKe sample)
#   decode     bench/decode.py (issue 8)
#   validator  bench/validator_bench.py: ours cold/warm/infill + the 128-candidate batch (issue 3)
#   validator-kb  the KernelBench-style baseline rows, merged with the previous part's JSON (issue 3)
#   sft        bench/sft_throughput.py at the DICE-1.7B shape (issue 7)
#   server     bench/server_latency.py (issue 4)
#   cuke       bench/cuke_build.py on a 600-pair sample (issue 6)
set -uo pipefail
part=${1:?usage: bench/gpu_session.sh tests|decode|validator|validator-kb|sft|server|cuke}
source "$(dirname "$0")/device_setup.sh" || exit 1
python3 -m pip install -q --no-index --no-deps -e . >/dev/null 2>&1
out=${OUT:-/tmp/gpu_session_out}
mkdir -p "$out"
case "$part" in
    tests)        timeout 560 python3 -m pytest -q -rA --timeout 300 -m gpu -p no:cacheprovider tests 2>&1 \
                      | tee "$out/gpu_tests.log" | grep -E "^(PASSED|FAILED|ERROR)|passed|failed" ;;
    decode)       timeout 560 python3 bench/decode.py --out "$out/decode.json" --profile "$out/decode_profile.txt" 2>&1 | grep -v cudagraph_utils \
                      | tee "$out/decode.log" | tail -40 ;;
    validator)    timeout 560 python3 bench/validator_bench.py --parts ours,batch --out "$out/validator_a.json" 2>&1 \
                      | tee "$out/validator_a.log" | tail -40 ;;
    validator-kb) timeout 560 python3 bench/validator_bench.py --parts kernelbench --kb-problems 3 \
                      --merge "${2:?give the JSON written by the validator part}" --out "$out/validator.json" 2>&1 \
                      | tee "$out/validator.log" | tail -40 ;;
    sft)          timeout 560 python3 bench/sft_throughput.py --out "$out/sft_throughput.json" 2>&1 \
                      | tee "$out/sft.log" | tail -40 ;;
    server)       timeout 560 python3 bench/server_latency.py --out "$out/server_latency.json" 2>&1 \
                      | tee "$out/server.log" | tail -40 ;;
    cuke)         timeout 560 python3 bench/cuke_build.py --work /tmp/cuke_work --out "$out/cuke_build.json" \
                      --limit 600 --max-seconds 480 2>&1 | tee "$out/cuke.log" | tail -40 ;;
    *)            echo "unknown part: $part" >&2; exit 2 ;;
esac
