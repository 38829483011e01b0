#!/usr/bin/env bash
# The owed GPU work, in parts that each fit one 10-minute device command. Run from the repo root on the GPU
# machine (with `.whl` carried), e.g. `bash bench/gpu_session.sh tests`; logs and JSON land in $OUT.
# PART_TIMEOUT (seconds, default 560) caps a part, so that several parts can share one command; on a machine with
# two GPUs, parts pinned to different GPUs (CUDA_VISIBLE_DEVICES) can run side by side. Arguments after the part
# name go to its bench script (e.g. `decode --batches 1 --skip large`); OUT_TAG names its output files.
# Parts:
#   tests         every `gpu`-marked test
#   tests-validator / tests-engine / tests-other   the same, split (validator: its GPU stages, argument forms,
#                 environment and verdict contract, cheat suite | engine and model | server, SFT, CuKe, RL, recipe,
#                 model eval, seed library, held-out set)
#   heldout-check bench/heldout_user_style/check.py: the held-out user-style set's own solutions, strict (issue 32)
#   infill-heldout bench/infill_heldout.py: the model's own infill of the held-out set's blanked kernels through the
#                 real server, share validated and p50/p95 (issue 32), e.g. `infill-heldout --checkpoint PATH`
#   tests-corpus  the validator corpus's GPU tests (tests/test_validator_corpus.py, issue 30): every honest file passes
#                 ide (and strict where marked), every wrong one is rejected as incorrect; a test's timeout is the
#                 part's, since the first test of each policy waits for that policy's whole batch of verdicts
#   corpus        bench/validator_corpus.py (issue 30): pass and rejection rates per style and bug, s per verdict
#   decode        bench/decode.py (issue 8), e.g. `decode --profile $OUT/profile.txt`
#   validator     bench/validator_bench.py (issue 3), e.g. `validator --parts ours,batch`
#   sft           bench/sft_throughput.py at the DICE-1.7B shape (issue 7)
#   sft-multi     bench/sft_multigpu.py: 1 GPU vs DDP vs FSDP2 in fp32 and bf16 (issue 7; needs 2 GPUs), e.g.
#                 `sft-multi --steps 40` (`--skip-fp32`: bf16 only; `--diagnose`: also FSDP2 in bf16 gather/reduce)
#   server        bench/server_latency.py (issue 4)
#   rl-rows       bench/rl_trace_rows.py: TraceRL rows packed vs one a round, forward + backward per response, by
#                 default at the DICE-1.7B shape (1,500-token prompt, 4,096-token response)
#   cuke          bench/cuke_build.py on a 600-pair sample (issue 6): throughput and stage breakdown
#   recipe        the dice-tiny recipe's stages for the part's time (`dice-copilot train recipe --max-minutes`, issue 32),
#                 e.g. `recipe --until sft`; stops in time and continues where it stopped in the next command (exit 4:
#                 not finished); hands back the recipe's progress log, and `recipe-pack STAGE` packs that stage's
#                 checkpoint into $OUT as 15 MB parts (README.md of the recipe says how to carry it on)
#   cuke-corpus   bench/cuke_build.py on the whole built-in corpus at --scale 2.5, resuming from the committed
#                 bench/cuke_progress.jsonl.xz; commit the returned cuke_progress.jsonl.xz in its place
#   probe-train   bench/data_probe.py (issue 31): one arm of the old-vs-new data probe, `probe-train v1 --steps 500`
#                 then `probe-train v2 --steps 500` on the same warm machine (work in /tmp/probe)
#   probe-eval    both arms scored side by side, e.g. `probe-eval --limit 32`: data_probe.json in $OUT
set -uo pipefail
part=${1:?usage: bench/gpu_session.sh PART [bench arguments] (see the comment at the top)}
shift
tag=${OUT_TAG:-$part}
source "$(dirname "$0")/device_setup.sh" || exit 1
out=${OUT:-/tmp/gpu_session_out}
limit=${PART_TIMEOUT:-560}
mkdir -p "$out"
run_tests() {  # log name, then test paths
    local name=$1; shift
    # -v: each result is in the log as it happens, so a part cut by its timeout still says what passed.
    timeout "$limit" python3 -m pytest -v -rfE --timeout 300 -m gpu -p no:cacheprovider "$@" 2>&1 \
        | tee "$out/$name.log" | grep -E "PASSED|FAILED|ERROR|passed|failed"
}
case "$part" in
    tests)           run_tests gpu_tests tests ;;
    tests-validator) run_tests gpu_tests_validator tests/test_validator_gpu.py tests/test_validator_argforms.py \
                         tests/test_validator_environment.py tests/test_validator_verdict_contract.py \
                         tests/test_validator_cheats.py ;;
    tests-engine)    run_tests gpu_tests_engine tests/test_engine_continuous.py tests/test_model_network.py \
                         tests/test_model_checkpoint.py tests/test_engine.py tests/test_few_row_linear.py ;;
    tests-other)     run_tests gpu_tests_other tests/test_server_gpu.py tests/test_sft_gpu.py tests/test_cuke_gpu.py \
                         tests/test_rl_gpu.py tests/test_recipe.py tests/test_model_eval.py tests/test_cuke_seeds.py \
                         tests/test_heldout_user_style.py ;;
    infill-heldout) timeout "$limit" python3 bench/infill_heldout.py --per-problem --out "$out/$tag.json" \
                       --max-seconds $((limit - 60)) "$@" 2>&1 | tee "$out/$tag.log" | tail -60 ;;
    heldout-check) timeout "$limit" python3 bench/heldout_user_style/check.py --json "$out/$tag.json" \
                       --max-seconds $((limit - 30)) "$@" 2>&1 | tee "$out/$tag.log" | tail -60 ;;
    tests-corpus) timeout "$limit" python3 -m pytest -v -rfE --timeout "$limit" -m gpu -p no:cacheprovider \
                      tests/test_validator_corpus.py 2>&1 | tee "$out/gpu_tests_corpus.log" \
                      | grep -E "PASSED|FAILED|ERROR|passed|failed" ;;
    corpus)       timeout "$limit" python3 bench/validator_corpus.py --out "$out/$tag.json" "$@" 2>&1 \
                      | tee "$out/$tag.log" | tail -70 ;;
    decode)       timeout "$limit" python3 bench/decode.py --out "$out/$tag.json" "$@" \
                      2>&1 | grep -v cudagraph_utils | tee "$out/$tag.log" | tail -40 ;;
    validator)    timeout "$limit" python3 bench/validator_bench.py --out "$out/$tag.json" "$@" \
                      2>&1 | tee "$out/$tag.log" | tail -40 ;;
    sft)          timeout "$limit" python3 bench/sft_throughput.py --out "$out/$tag.json" "$@" 2>&1 \
                      | tee "$out/$tag.log" | tail -40 ;;
    sft-multi)    timeout "$limit" python3 bench/sft_multigpu.py --out "$out/$tag.json" --work /tmp/sft_multi \
                      --timeout $(((limit - 30) / 3)) "$@" 2>&1 | tee "$out/$tag.log" | tail -40 ;;
    server)       timeout "$limit" python3 bench/server_latency.py --out "$out/$tag.json" "$@" 2>&1 \
                      | tee "$out/$tag.log" | tail -40 ;;
    rl-rows)      timeout "$limit" python3 bench/rl_trace_rows.py --preset dice-1.7b --prompt 1500 --response 4096 \
                      --responses 2 --out "$out/$tag.json" "$@" 2>&1 | tee "$out/$tag.log" | tail -40 ;;
    cuke)         timeout "$limit" python3 bench/cuke_build.py --work /tmp/cuke_work --out "$out/$tag.json" \
                      --limit 600 --max-seconds $((limit - 110)) "$@" 2>&1 | tee "$out/$tag.log" | tail -40 ;;
    recipe)       timeout "$limit" python3 -m dice_copilot.cli train recipe trainer/recipes/dice-tiny \
                      --work runs/dice-tiny --max-minutes $(((limit - 45) / 60)) "$@" 2>&1 | tee "$out/$tag.log" | tail -40
                  tail -n 2 runs/dice-tiny/*/metrics.jsonl  # each stage's last steps: loss, tokens per second
                  cp trainer/recipes/dice-tiny/progress.json trainer/recipes/dice-tiny/PROGRESS.md "$out/" ;;
    recipe-pack)  stage=${1:?usage: recipe-pack STAGE}
                  tar -cf - -C runs/dice-tiny "$stage/checkpoint" "$stage/stage.json" | split -b 15M - "$out/$stage.tar."
                  ls -la "$out" ;;
    cuke-corpus)  timeout "$limit" python3 bench/cuke_build.py --work /tmp/cuke_work --out "$out/$tag.json" \
                      --scale 2.5 --progress bench/cuke_progress.jsonl.xz --max-seconds $((limit - 120)) "$@" 2>&1 \
                      | tr '\r' '\n' | tee "$out/$tag.log" | tail -40
                  # again on its own: a run cut off by the limit still hands back what it stored
                  python3 bench/cuke_build.py --work /tmp/cuke_work --out "$out/$tag.json" --export-only ;;
    probe-train)  timeout "$limit" python3 bench/data_probe.py train "$@" --work /tmp/probe \
                      --max-minutes $(((limit - 90) / 60)) 2>&1 | tee "$out/$tag.log" | tail -20 ;;
    probe-eval)   timeout "$limit" python3 bench/data_probe.py eval --work /tmp/probe --out "$out/data_probe.json" "$@" \
                      2>&1 | tee "$out/$tag.log" | tail -40 ;;
    *)            echo "unknown part: $part" >&2; exit 2 ;;
esac
