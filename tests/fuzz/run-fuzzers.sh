#!/usr/bin/env bash
# Builds the libFuzzer targets (IDX reader, checkpoint loader) with AddressSanitizer, UndefinedBehavior-
# Sanitizer and LeakSanitizer, and runs each for SECONDS (default 60) on a copy of its seed corpus.
# Exits non-zero on any crash, leak, sanitizer report, escaped exception, timeout or build failure.
#
#   tests/fuzz/run-fuzzers.sh [SECONDS]
#
# Needs (Debian 12): clang libclang-rt-14-dev zlib1g-dev nlohmann-json3-dev. LENET_FUZZ_CXX overrides the
# compiler (default clang++, else clang++-14); LENET_FUZZ_CXXFLAGS adds flags (e.g. -I for a JSON header
# folder elsewhere). On failure the build, logs and the crashing input are kept and their folder printed.
set -euo pipefail

seconds="${1:-60}"
if ! [[ "$seconds" =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: $0 [SECONDS]  (seconds per target, a positive integer; got '$seconds')" >&2
  exit 2
fi

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"

cxx="${LENET_FUZZ_CXX:-}"
if [[ -z "$cxx" ]]; then
  for c in clang++ clang++-14; do
    if command -v "$c" >/dev/null; then cxx="$c"; break; fi
  done
fi
if [[ -z "$cxx" ]]; then
  echo "run-fuzzers: no clang++ found (apt-get install clang libclang-rt-14-dev)" >&2
  exit 1
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/lenet-fuzz.XXXXXX")"
keep_work=1
trap '[[ $keep_work == 0 ]] && rm -rf "$work"' EXIT

# -fno-sanitize-recover: UBSan otherwise prints its report and carries on, and libFuzzer would pass.
# -O1 -g: fast enough to fuzz, with usable stack traces.
# shellcheck disable=SC2054  # the commas belong to -fsanitize's value
flags=(-std=c++17 -g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
       -I"$root")
# shellcheck disable=SC2206  # word splitting of the user's extra flags is intended
flags+=(${LENET_FUZZ_CXXFLAGS:-})

echo "run-fuzzers: building with $cxx in $work"
"$cxx" "${flags[@]}" -DLENET_HAVE_ZLIB=1 "$here/fuzz_idx.cpp" "$root/io/idx.cpp" -lz -o "$work/fuzz_idx"
"$cxx" "${flags[@]}" "$here/fuzz_checkpoint.cpp" "$root/engine/checkpoint.cpp" "$root/engine/replace_file.cpp" \
  "$root/model/lenet.cpp" -o "$work/fuzz_checkpoint"

export ASAN_OPTIONS="detect_leaks=1:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"

failed=0
for target in fuzz_idx fuzz_checkpoint; do
  # A copy: libFuzzer adds the inputs it finds to the first corpus folder, and the committed seeds stay small.
  mkdir -p "$work/corpus/$target" "$work/artifacts/$target"
  cp "$here/corpus/$target/"* "$work/corpus/$target/"
  log="$work/$target.log"
  echo "run-fuzzers: $target for ${seconds} s"
  # -max_len: headers and tiny IDX files are under 1 KB; room to grow without slowing mutation down.
  # -timeout: one input taking seconds is a hang worth reporting (a real one runs in microseconds).
  set +e
  "$work/$target" "$work/corpus/$target" -max_total_time="$seconds" -max_len=8192 -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$work/artifacts/$target/" >"$log" 2>&1
  rc=$?
  set -e
  runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)"
  if [[ $rc -ne 0 ]] || grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:|SUMMARY: ' "$log"; then
    echo "run-fuzzers: $target FAILED (exit status $rc); log $log, inputs in $work/artifacts/$target/" >&2
    grep -E 'ERROR:|runtime error:|SUMMARY:|terminate called|what\(\)|Test unit written' "$log" | head -n 20 >&2 || true
    failed=1
  else
    echo "run-fuzzers: $target passed: ${runs:-?} executions, $(find "$work/corpus/$target" -type f | wc -l) corpus entries"
  fi
done

if [[ $failed -ne 0 ]]; then
  echo "run-fuzzers: FAILED; everything is kept in $work" >&2
  exit 1
fi
keep_work=0
echo "run-fuzzers: all targets passed"
