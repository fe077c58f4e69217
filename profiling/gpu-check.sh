#!/usr/bin/env bash
# The project's GPU check: build, run every test with the GPU tests active, compute-sanitizer on short
# runs of both modes, the source text's experiment (10 epochs, batch 256, lr 0.2, R = 1 and R = 2) in the
# naive and graph modes, a sweep of both modes over replicas and batch sizes, and the CPU backend beside
# them; write a log, the metrics files and a summary into OUTDIR.
#
# Usage: profiling/gpu-check.sh OUTDIR
# Works on any Linux machine with a GPU, the CUDA toolkit and CMake. On a host without network it takes
# what it lacks from .gpu-bundle/ (../shared/gpu/make-bundle.sh, with LENET_BUNDLE_INCLUDES="CLI nlohmann"):
# the data set, GoogleTest sources, cuDNN headers, CLI11 and nlohmann/json. cuDNN and cuBLAS may come from
# PyTorch's wheels (nvidia.cudnn, nvidia/cu13). Every step has a time limit and a failure does not stop
# the others. The GPU tests fail, not skip, when no device answers (LENET_GPU_REQUIRED=1).
# Environment: LENET_CHECK_BUDGET (seconds for everything, default 450), LENET_COMMIT (when the tree has
# no .git), LENET_CHECK_EPOCHS (default 10), LENET_CHECK_SWEEP (0 skips the sweep),
# LENET_CHECK_SANITIZERS (compute-sanitizer tools, default "memcheck racecheck"), CUDNN_ROOT, CUBLAS_ROOT,
# LENET_CHECK_PHASES (any of: tests gputests accuracy sanitizers experiment sweep bench cpu, run in this
# order; default all but gputests and accuracy, which are skipped when tests is given: gputests runs the
# GPU-labelled tests but the slow accuracy test, accuracy runs that one alone. When one run's time is
# short, correctness first: "gputests sanitizers", then "accuracy experiment", then "sweep bench cpu",
# each into its own OUTDIR; the build folder is reused when the tree is kept). Where only a few files
# come back from the host, give a scratch OUTDIR and pack it afterwards: the budget ends every step in
# time for that, and an outer timeout makes sure of it (e.g. LENET_CHECK_BUDGET=420 timeout -k 5 450
# profiling/gpu-check.sh /tmp/gc; tar czf DEST.tgz -C /tmp/gc .).
set -uo pipefail
case ${1:-} in
  -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  -*) echo "gpu-check.sh: unknown option $1 (usage: profiling/gpu-check.sh OUTDIR; --help)" >&2; exit 2 ;;
esac
if (($# != 1)) || [[ -z $1 ]]; then
  echo "usage: profiling/gpu-check.sh OUTDIR (--help says more)" >&2
  exit 2
fi
phases=" ${LENET_CHECK_PHASES:-tests sanitizers experiment sweep bench cpu} "
phase() { [[ $phases == *" $1 "* ]]; }
all_phases="tests gputests accuracy sanitizers experiment sweep bench cpu"
for p in $phases; do
  if [[ " $all_phases " != *" $p "* ]]; then
    echo "gpu-check.sh: unknown phase '$p' in LENET_CHECK_PHASES ($all_phases)" >&2
    exit 2
  fi
done
# Where the log and the results go is settled first: a check that cannot keep what it finds stops now.
out=$1
if ! { mkdir -p "$out" && out=$(cd "$out" && pwd) && : >"$out/log"; } 2>/dev/null; then
  echo "gpu-check.sh: cannot write into OUTDIR $1" >&2
  exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
exec > >(tee "$out/log") 2>&1
tee_pid=$!  # waited for at the end, so that the log is whole when the script returns
export LENET_GPU_REQUIRED=1  # a GPU check whose GPU tests all skipped would test nothing

start_time=$(date +%s)
budget=${LENET_CHECK_BUDGET:-450}
epochs=${LENET_CHECK_EPOCHS:-10}
bundle=$root/.gpu-bundle
build=$root/build-gpu
results=()

remaining() { echo $((budget - ($(date +%s) - start_time))); }

# step NAME LIMIT CMD...: runs CMD with at most LIMIT seconds (less if the budget is nearly spent).
step() {
  local name=$1 limit=$2 left rc t0
  shift 2
  left=$(remaining)
  ((left < limit)) && limit=$left
  if ((limit < 5)); then
    echo "=== $name: skipped, time budget spent"
    results+=("$name|skipped (budget)")
    return 1
  fi
  echo "=== $name (limit ${limit}s): $*"
  t0=$(date +%s)
  timeout --kill-after=10 "$limit" "$@"
  rc=$?
  local status="ok"
  ((rc == 124 || rc == 137)) && status="timed out"
  ((rc != 0 && rc != 124 && rc != 137)) && status="failed (exit $rc)"
  echo "=== $name: $status in $(($(date +%s) - t0))s"
  results+=("$name|$status")
  return $rc
}

# ctest_step NAME LIMIT CTEST-ARGS...: step for ctest, which stops its tests 15 s before the limit
# (--stop-time also cuts the tests whose TIMEOUT property --timeout cannot override), so that its
# report and --output-junit file are written before the limit kills it.
ctest_step() {
  local name=$1 limit=$2 left cut
  shift 2
  left=$(remaining)
  ((left < limit)) && limit=$left
  cut=$((limit > 30 ? limit - 15 : limit / 2 + 1))  # a stop time already past would mean tomorrow's
  # In UTC: CTest applies the local offset in whole hours, so in a zone such as +05:30 the time is wrong.
  step "$name" "$limit" env TZ=UTC ctest --test-dir "$build" --output-on-failure "${ctest_sizes[@]}" \
    --stop-time "$(TZ=UTC date -d "@$(($(date +%s) + cut))" +%H:%M:%S)" "$@"
}

echo "=== environment"
commit=${LENET_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
echo "commit: $commit"
date -u +"date: %Y-%m-%dT%H:%M:%SZ"
uname -a
nvidia-smi || echo "nvidia-smi: not available"
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1)
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
# Tests run four at a time only where every GPU takes several processes at once: in Exclusive_Process mode
# a second test's context fails (cudaErrorDevicesUnavailable), which the GPU tests count as a failure.
compute_modes=$(nvidia-smi --query-gpu=compute_mode --format=csv,noheader 2>/dev/null)
compute_shown=$(paste -sd , <<<"${compute_modes:-unknown}")
echo "compute mode: $compute_shown"
test_jobs=4
[[ -n $compute_modes ]] && grep -qvx 'Default' <<<"$compute_modes" && test_jobs=1
# The toolkit: CUDA_HOME, else /usr/local/cuda, else the folder above the nvcc on PATH.
cuda_dir=${CUDA_HOME:-/usr/local/cuda}
[[ -z ${CUDA_HOME:-} && ! -d $cuda_dir ]] && command -v nvcc >/dev/null &&
  cuda_dir=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
export PATH="$cuda_dir/bin:$PATH"
# compute-sanitizer has a link in bin in the toolkit's usual layout; its own folder comes last, for others.
[[ -x $cuda_dir/compute-sanitizer/compute-sanitizer ]] && export PATH="$PATH:$cuda_dir/compute-sanitizer"
sanitizer=$(command -v compute-sanitizer)  # the sanitizer phase says when it is missing
echo "compute-sanitizer: ${sanitizer:-not found}"
nvcc --version | tail -n 2 || echo "nvcc: not found"
cmake --version | head -n 1
# A passing test's whole output in the JUnit files (CTest keeps 1 KiB by default), so that they show
# which of a program's tests ran; CMake 3.24 and later.
ctest_sizes=()
[[ $(ctest --help 2>&1) == *--test-output-size-passed* ]] && ctest_sizes=(--test-output-size-passed 1000000)
nproc

# cuDNN: the toolkit's or the system's, else PyTorch's wheel.
cmake_args=(-DCMAKE_BUILD_TYPE=Release)
cudnn_root=${CUDNN_ROOT:-}
if [[ -z $cudnn_root ]] && ! ls "$cuda_dir"/lib64/libcudnn.so* >/dev/null 2>&1 && ! ldconfig -p 2>/dev/null | grep -q 'libcudnn\.so'; then
  cudnn_root=$(python3 -c 'import nvidia.cudnn as m; print(m.__path__[0])' 2>/dev/null || true)
fi
if [[ -n $cudnn_root ]]; then
  echo "cuDNN from $cudnn_root"
  cmake_args+=("-DCUDNN_ROOT=$cudnn_root")
  export LD_LIBRARY_PATH="$cudnn_root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
# cuDNN's headers: beside its library, the toolkit's or the system's, else the bundle's (a wheel has none,
# and a library found in the toolkit or by ldconfig may have come without them).
cudnn_headers=
for f in ${cudnn_root:+"$cudnn_root"/include/cudnn_version.h} "$cuda_dir"/include/cudnn_version.h \
  /usr/include/cudnn_version.h /usr/include/*-linux-gnu/cudnn_version.h; do
  [[ -f $f ]] && cudnn_headers=$f && break
done
[[ -z $cudnn_headers && -d $bundle/cudnn/include ]] && cmake_args+=("-DCUDNN_INCLUDE_DIR=$bundle/cudnn/include")
# The first library in PyTorch's NVIDIA wheels matching */lib/PATTERN, or nothing.
wheel_lib() {
  python3 - "$1" 2>/dev/null <<'PY' || true
import glob, sys, nvidia
print(min((p for d in nvidia.__path__ for p in glob.glob(d + "/*/lib/" + sys.argv[1])), default=""))
PY
}
# cuBLAS: the toolkit's or the system's, else PyTorch's wheel of the toolkit's major version
# (nvidia/cu13/lib for CUDA 13, nvidia/cublas/lib before); the programs open it there (graphs/cublas_library.hpp).
if [[ -z ${CUBLAS_ROOT:-} ]] && ! ls "$cuda_dir"/lib64/libcublas.so* >/dev/null 2>&1 &&
  ! ldconfig -p 2>/dev/null | grep -q 'libcublas\.so'; then
  cuda_major=$(nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
  cublas_lib=$(wheel_lib "libcublas.so.${cuda_major:-13}")
  [[ -n $cublas_lib ]] && CUBLAS_ROOT=$(dirname "$(dirname "$cublas_lib")")
fi
if [[ -n ${CUBLAS_ROOT:-} ]]; then
  echo "cuBLAS from $CUBLAS_ROOT"
  cmake_args+=("-DCUBLAS_ROOT=$CUBLAS_ROOT")
  export LD_LIBRARY_PATH="$CUBLAS_ROOT/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
[[ -d $bundle/googletest && ! -f /usr/lib/x86_64-linux-gnu/libgtest.a && ! -f /usr/lib/libgtest.a ]] &&
  cmake_args+=("-DLENET_GTEST_SOURCE_DIR=$bundle/googletest")
[[ -d $bundle/include ]] && cmake_args+=("-DLENET_EXTRA_INCLUDE_DIR=$bundle/include")
# CUPTI (lenet-bench's kernel columns): the toolkit's (in lib64 since CUDA 13, extras/CUPTI before),
# else PyTorch's wheel (nvidia-cuda-cupti).
toolkit_cupti=
for f in "$cuda_dir"/lib64/libcupti.so* "$cuda_dir"/extras/CUPTI/lib64/libcupti.so*; do
  [[ -e $f ]] && toolkit_cupti=$f && break
done
if [[ -n $toolkit_cupti ]]; then
  echo "CUPTI from $toolkit_cupti"
else
  cupti_lib=$(wheel_lib "libcupti.so*")
  cupti_dir=$(dirname "$(dirname "$cupti_lib")")
  if [[ -n $cupti_lib && -f $cupti_dir/include/cupti.h ]]; then
    echo "CUPTI from $cupti_lib"
    cmake_args+=("-DCUDA_cupti_LIBRARY=$cupti_lib" "-DCUDAToolkit_CUPTI_INCLUDE_DIR=$cupti_dir/include")
    export LD_LIBRARY_PATH="$cupti_dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
fi
# The Python tests with the python3 on PATH (the one holding PyTorch on GPU hosts), not Debian's.
command -v python3 >/dev/null && cmake_args+=("-DLENET_PYTHON=$(command -v python3)")
command -v ninja >/dev/null && cmake_args+=(-G Ninja)
# Build for the GPU that is here, as nvidia-smi names its compute capability (9.0 -> 90), without the
# test program CMake's "native" compiles and runs; CMAKE_CUDA_ARCHITECTURES wins.
gpu_arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' .')
if [[ -n ${CMAKE_CUDA_ARCHITECTURES:-} ]]; then
  cmake_args+=("-DCMAKE_CUDA_ARCHITECTURES=$CMAKE_CUDA_ARCHITECTURES")
elif [[ $gpu_arch =~ ^[0-9]+$ ]]; then
  cmake_args+=("-DCMAKE_CUDA_ARCHITECTURES=$gpu_arch")
fi

# Data: raw IDX files in a scratch folder, so the check does not depend on zlib being there.
data_src=${LENET_DATA_DIR:-}
[[ -z $data_src && -d $bundle/fashion-mnist ]] && data_src=$bundle/fashion-mnist
[[ -z $data_src ]] && data_src=/usr/share/datasets/fashion-mnist
data=$build/fashion-mnist
mkdir -p "$data"
missing=()
for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
  if [[ -f $data_src/$f ]]; then cp "$data_src/$f" "$data/$f" || missing+=("$f")
  elif [[ -f $data_src/$f.gz ]]; then gzip -dc "$data_src/$f.gz" >"$data/$f" || missing+=("$f.gz")
  else missing+=("$f"); fi
done
# Without the data most tests and every run fail: the summary says why, and the exit status is 1.
((${#missing[@]} > 0)) && results+=("data|missing or unreadable in $data_src: ${missing[*]}")
export LENET_DATA_DIR=$data
echo "data: $data (from $data_src)"

train=$build/engine/lenet-train
if step "configure" 120 cmake -S . -B "$build" "${cmake_args[@]}" && step "build" 300 cmake --build "$build" -j "$(nproc)"; then
  step "version" 20 "$train" --version
  # Four at a time (where the compute mode allows): the CPU references (portable GEMM, no BLAS on GPU
  # hosts) dominate and use the cores.
  phase tests && ctest_step "tests" 420 -j "$test_jobs" --output-junit "$out/ctest.xml"
  # Only the GPU tests (the CPU suite is what CI runs on every change): the shortest check of the CUDA
  # paths. The accuracy test (ten epochs on the CPU as its reference) is a phase of its own.
  # With the sanitizers to follow, they keep 180 s of what is left (a short probe, then four runs of
  # about 40 s), the tests at least 120; without compute-sanitizer nothing is kept.
  gpu_limit=240
  if phase sanitizers && [[ -n $sanitizer ]]; then
    gpu_limit=$(($(remaining) - 180))
    ((gpu_limit > 240)) && gpu_limit=240
    ((gpu_limit < 120)) && gpu_limit=120
  fi
  phase gputests && ! phase tests && ctest_step "gpu tests" "$gpu_limit" -j "$test_jobs" -L gpu -E '^test_cuda_accuracy$' \
    --output-junit "$out/ctest-gpu.xml"
  phase accuracy && ! phase tests && ctest_step "accuracy test" 400 -R '^test_cuda_accuracy$' \
    --output-junit "$out/ctest-accuracy.xml"
  # compute-sanitizer on short runs of both modes (two replicas sharing GPU 0; 600 examples make two
  # full minibatches and a partial one), after the tests: their bit-for-bit comparisons are the only
  # check of the ordering between streams (the ring's copies), which neither tool sees. The tests leave
  # the sanitizer 180 s at least; its four runs share what is left, at most 150 s each. A failed CUDA
  # call in our code already fails the run itself; the sanitizer's verdict is about memory errors
  # (memcheck) and shared-memory races (racecheck, hazards of error severity), not about the calls cuDNN
  # and cuBLAS make and handle inside. Racecheck looks only at kernels whose names hold "lenet" (kns: a
  # substring of the name; ours, in namespace lenet): hazards inside cuDNN's and cuBLAS's kernels are not
  # ours to fix, and instrumenting them costs most of the step's time.
  if phase sanitizers && [[ -z $sanitizer ]]; then
    results+=("compute-sanitizer|not found")
  elif phase sanitizers; then
    # First whether it works here at all (on some virtual machines it refuses the device): the GPU probe
    # test under memcheck. Its failure stands for the four runs, which are then left out.
    # The sanitizer's own lines go to a file: on gVisor it says "Device not supported" (then fails the
    # first allocation, which the test makes).
    probe_report=$out/sanitizer-probe.txt
    step "sanitizer probe" 60 compute-sanitizer --tool memcheck --error-exitcode 99 --log-file "$probe_report" \
      "$build/tests/test_gpu_probe" --gtest_filter=CudaProbe.DeviceAnswersAndIsUsable
    probe_rc=$?
    [[ -f $probe_report ]] && cat "$probe_report"
    last=$((${#results[@]} - 1))
    refused=$(grep -i -m 1 'device not supported' "$probe_report" 2>/dev/null | tr -d '|')
    if [[ -n $refused ]]; then
      results[last]="sanitizer probe|compute-sanitizer refuses the device here ($refused); no runs"
      probe_rc=1
    fi
    case $probe_rc in
      0) ;;
      124 | 137) results[last]="sanitizer probe|timed out; no runs" ;;
      99) results[last]="sanitizer probe|errors found (exit 99)" ;;
      *) [[ ${results[last]} == *skipped* || ${results[last]} == *refuses* ]] ||
        results[last]="sanitizer probe|failed (exit $probe_rc): compute-sanitizer or the GPU unusable here (kernel $(uname -r)); no runs" ;;
    esac
    sanitizer_help=$(compute-sanitizer --help 2>&1)
    # Where OpenBLAS takes its generic kernels, lenet-train starts itself again with others (README): the
    # runs under the sanitizer are given those from the start, so that the sanitizer sees one start.
    kernels=$("$train" --version 2>/dev/null | sed -n 's/.*CPU GEMM openblas, \(.*\) kernels).*/\1/p')
    sanitizer_env=(env)
    [[ -n $kernels ]] && sanitizer_env+=("OPENBLAS_CORETYPE=$kernels")
    tools=()
    ((probe_rc == 0 || probe_rc == 99)) && read -ra tools <<<"${LENET_CHECK_SANITIZERS:-memcheck racecheck}"
    runs_left=$((2 * ${#tools[@]}))
    for tool in "${tools[@]}"; do
      args=(--tool "$tool" --error-exitcode 99)
      [[ $sanitizer_help == *--report-api-errors* ]] && args+=(--report-api-errors no)
      if [[ $tool == racecheck ]]; then
        [[ $sanitizer_help == *--racecheck-detect-level* ]] && args+=(--racecheck-detect-level error)
        if [[ $sanitizer_help == *--kernel-name* ]]; then args+=(--kernel-name kns=lenet)
        elif [[ $sanitizer_help == *--kernel-regex* ]]; then args+=(--kernel-regex kns=lenet); fi
      fi
      for mode in graph naive; do
        # An equal share of what is left, from 30 s (step gives no more than what is left) to 150 s: where
        # the shares would be too short, the first runs (memcheck first) get their time, not the last.
        limit=$(($(remaining) / runs_left))
        ((limit > 150)) && limit=150
        ((limit < 30)) && limit=30
        runs_left=$((runs_left - 1))
        report=$out/sanitizer-$tool-$mode.txt
        step "sanitizer $tool $mode" "$limit" "${sanitizer_env[@]}" compute-sanitizer "${args[@]}" --log-file "$report" \
          "$train" --backend cuda --mode $mode --num-gpus 1 --replicas 2 --epochs 1 --train-limit 600 --test-limit 300 --quiet
        # Exit 99 is the sanitizer's own verdict (--error-exitcode); any other failure is the run's.
        (($? == 99)) && results[${#results[@]} - 1]="sanitizer $tool $mode|errors found (exit 99)"
        [[ -f $report ]] && tail -n 5 "$report"
      done
    done
  fi
  # The source text's experiment. Two replicas use two GPUs where there are two, else share one.
  if ((gpus >= 2)); then r2=(--num-gpus 2); else r2=(--num-gpus 1 --replicas 2); fi
  phase experiment && for mode in naive graph; do
    step "$mode R=1" 200 "$train" --backend cuda --mode $mode --num-gpus 1 --epochs "$epochs" --metrics "$out/$mode-r1.jsonl"
    step "$mode R=2" 200 "$train" --backend cuda --mode $mode "${r2[@]}" --epochs "$epochs" --metrics "$out/$mode-r2.jsonl"
  done
  # Both modes side by side over replicas sharing GPU 0 and global batch sizes, on the first 16384
  # training examples (one timed pass each; the table scales seconds to a 60,000-example epoch).
  if phase sweep && [[ ${LENET_CHECK_SWEEP:-1} != 0 ]]; then
    mkdir -p "$out/sweep"
    for b in 64 256 1024; do
      for r in 1 2 4 8; do
        for mode in naive graph; do
          step "sweep $mode B=$b R=$r" 60 "$train" --backend cuda --mode $mode --num-gpus 1 --replicas $r --batch-size $b \
            --epochs 1 --train-limit 16384 --test-limit 1000 --quiet --metrics "$out/sweep/$mode-b$b-r$r.jsonl"
        done
      done
    done
  fi
  # lenet-bench with the PyTorch peers (textbook and CUDA-graph variants) in one combined table, and the
  # pictures drawn from everything in OUTDIR.
  if phase bench; then
    peers=()
    # A peer that fails while profiling has already written its row without the profile's fields.
    for variant in textbook graphs; do
      rm -f "$out/peer-$variant.json"
      step "peer $variant" 240 python3 profiling/peers/lenet_peer.py --variant $variant --num-gpus 1 --epochs 3 \
        --profile-steps 50 --data-dir "$data" --json "$out/peer-$variant.json"
      [[ -f $out/peer-$variant.json ]] && peers+=("$out/peer-$variant.json")
    done
    step "lenet-bench" 400 "$build/profiling/lenet-bench" --num-gpus 1 --data-dir "$data" --json "$out/bench.json" \
      --markdown "$out/bench.md" ${peers[@]:+--peers "${peers[@]}"}
    step "plots" 60 python3 profiling/plot.py --out "$out/plots" "$out"
  fi
  phase cpu && step "cpu R=1" 300 "$train" --backend cpu --epochs "$epochs" --metrics "$out/cpu-r1.jsonl"
fi

# Exit status: 0 when every step ran and passed; 1 when one failed, timed out or was skipped for time.
status=0
for r in "${results[@]}"; do [[ ${r#*|} == ok ]] || status=1; done

echo "=== summary"
{
  echo "# GPU check"
  echo
  echo "- commit: $commit"
  echo "- GPU: ${gpu_name:-none} x ${gpus}, driver ${driver:-none}," \
    "compute mode $compute_shown (tests $test_jobs at a time)"
  echo "- date: $(date -u +%Y-%m-%d)"
  echo "- wall time: $(($(date +%s) - start_time)) s of a ${budget} s budget"
  echo "- exit status: $status ($( ((status == 0)) && echo "every step passed" || echo "see the table"))"
  [[ ${gpus:-0} -ge 2 ]] ||
    echo "- one GPU: peer copies and event waits between GPUs are not tested (the two-GPU test skips; replicas share it)"
  echo
  echo "| step | result |"
  echo "|---|---|"
  for r in "${results[@]}"; do echo "| ${r%%|*} | ${r#*|} |"; done
  echo
  python3 - "$out" <<'PY' || echo "(no metrics summary: python3 failed)"
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])


def records(f):  # a line cut off by a step's time limit is left out, not the whole summary
    found = []
    for line in f.read_text().splitlines():
        try:
            found.append(json.loads(line))
        except ValueError:
            pass
    return found


rows = []
sweep = {}
for f in sorted(out.glob("sweep/*.jsonl")):
    lines = records(f)
    if lines:
        l = lines[-1]
        sweep[(l["batch_size"], l["replicas"], l["mode"])] = l["epoch_seconds"] * 60000 / 16384
if sweep:
    print("Sweep (one GPU, replicas sharing it; seconds per 60,000-example epoch, scaled from 16,384):")
    print()
    print("| batch | replicas | naive s/epoch | graph s/epoch | naive / graph |")
    print("|---|---|---|---|---|")
    for b, r in sorted({(k[0], k[1]) for k in sweep}):
        n, g = sweep.get((b, r, "naive")), sweep.get((b, r, "graph"))
        ratio = "%.2f" % (n / g) if n and g else "-"
        print("| %d | %d | %s | %s | %s |" % (b, r, "%.3f" % n if n else "-", "%.3f" % g if g else "-", ratio))
    print()
for f in sorted(out.glob("*.jsonl")):
    lines = records(f)
    if not lines:
        continue
    last = lines[-1]
    mean = sum(l["epoch_seconds"] for l in lines) / len(lines)
    rows.append((f.name, last["backend"], last["mode"], last["replicas"], ",".join(last["devices"]), len(lines),
                 last["test_acc"], last["train_loss"], mean, sum(l["examples_per_second"] for l in lines) / len(lines)))
if rows:
    print("| run | backend | mode | replicas | devices | epochs | test acc | train loss | s/epoch | examples/s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print("| %s | %s | %s | %d | %s | %d | %.4f | %.4f | %.3f | %.0f |" % r)
PY
  [[ -f $out/bench.md ]] && { echo; cat "$out/bench.md"; }
} | tee "$out/summary.md"
exec >&- 2>&-
wait "$tee_pid"
exit $status
