#!/usr/bin/env bash
# The GPU check (issue 38, item 6): on the lent GPU machine, in one device-tool call, install xsim from
# the wheels in .whl/ (bench/gpu_prepare.sh fills it here), print the GPU and the versions, run the
# CUDA tests, then the benchmarks on cuda:0, and write one report, $OUT/gpu_report.md, with each step's
# log beside it ($OUT/*.log; 8 files at most come back). Each step has its own timeout, the sum 440 s
# (install 60, env 30, tests 240, benchmarks 30+30+25+25), under 8 minutes; a failed or timed-out step
# is recorded and the next one runs. Exit status 1 if any failed.
#
#     bash bench/gpu_check.sh             # on the device (bench/README.md, "GPU check", has the call)
#     bash bench/gpu_check.sh --dry-run   # here, no GPU: everything up to the first GPU call
#
# --dry-run checks the wheel set (bench/gpu_wheels.py and pip's own resolver, for CPython 3.12), this
# script's syntax, that each benchmark accepts the flags passed to it, and writes the report; it never
# runs nvidia-smi, the tests or a benchmark. Without .whl/ the wheel step is SKIPPED, not failed.
# Environment: OUT (report folder; default ./out/gpu_check), PY (default python3: the device's 3.12),
# WHEEL_PY (a Python 3.12 for the dry-run's pip; default PY), GPU_CHECK_STEPS (comma-separated steps to
# run, default all: install,env,tests,cloth,pyramid,vec3,saxpy), GPU_CHECK_TEST_WORKERS (default 14),
# GPU_CHECK_TESTS_TIMEOUT (default 240 s), GPU_CHECK_COLLECT=0 (the dry run skips collecting the tests).
set -u
cd "$(dirname "$0")/.."
DRY=0
[[ ${1:-} == --dry-run ]] && DRY=1
OUT=${OUT:-out/gpu_check}
PY=${PY:-python3}
WHEEL_PY=${WHEEL_PY:-$PY}
STEPS=${GPU_CHECK_STEPS:-install,env,tests,cloth,pyramid,vec3,saxpy}
WORKERS=${GPU_CHECK_TEST_WORKERS:-14}
COLLECT=${GPU_CHECK_COLLECT:-1}
# the device's test run: every test marked cuda (the cuda:0 variants of the device/default_device
# fixtures, and tests/cuda's); -v prints each result as it comes, so a timed-out run still counts
PYTEST_CUDA=(-m pytest -p no:cacheprovider --dist loadfile -m cuda tests)
SITE=/tmp/site
mkdir -p "$OUT"
REPORT=$OUT/gpu_report.md
ROWS=$OUT/.rows  # removed at the end: what comes back is the report and the logs
: >"$ROWS"
FAILED=0
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1

# Each benchmark: step name, script, the flags the device run passes, its timeout (seconds).
# A benchmark whose --help lacks --device is not run (it would time the CPU) and the report says so.
BENCHES=(
  "cloth|bench/cloth.py|--device cuda:0 --repeat 3 --no-newton|30"
  "pyramid|bench/rigid.py|--device cuda:0 --repeat 3 --rows 8 15 --skip-small --no-newton|30"
  "vec3|bench/vec3_backward.py|--device cuda:0 --repeat 11|25"
  "saxpy|bench/saxpy.py|--device cuda:0 --repeat 11|25"
)

wanted() { [[ ",$STEPS," == *",$1,"* ]]; }

# record STEP STATUS SECONDS LOG NOTE: one row of the report's table
record() {
  printf '| %s | %s | %s | %s | %s |\n' "$1" "$2" "$3" "${4:--}" "${5:-}" >>"$ROWS"
  [[ $2 == FAIL* || $2 == TIMEOUT* ]] && FAILED=1
  echo "== $1: $2 ${5:-}"
}

# step NAME LOG TIMEOUT CMD...: run CMD under `timeout`, appending to LOG, and record how it ended
step() {
  local name=$1 log=$2 limit=$3 t0 rc secs status
  shift 3
  echo "### $name: $*" >>"$OUT/$log"
  t0=$(date +%s)
  timeout -k 5 "$limit" "$@" >>"$OUT/$log" 2>&1
  rc=$?
  secs=$(($(date +%s) - t0))
  if ((rc == 0)); then status=ok
  elif ((rc == 124 || rc == 137)); then status="TIMEOUT (${limit} s)"
  else status="FAIL (rc $rc)"; fi
  record "$name" "$status" "$secs" "$log" ""
  return $rc
}

# flags_accepted SCRIPT FLAGS...: every --flag passed appears in the script's --help; prints "no --X" for
# each that does not (all of them, so that a missing --device does not hide another)
flags_accepted() {
  local script=$1 help f bad=0
  shift
  help=$("$PY" "$script" --help 2>&1) || { echo "$script --help failed: $help"; return 2; }
  for f in "$@"; do
    [[ $f == --* ]] || continue
    grep -qE -- "(^|[][ ,])$f([][ =,]|$)" <<<"$help" || { echo "no $f"; bad=1; }
  done
  return $bad
}

# rows_note STEP NOTE: set the note of STEP's row
rows_note() {
  local tmp=$ROWS.tmp
  awk -F' [|] ' -v s="$1" -v n="$2" 'BEGIN{OFS=" | "} $1=="| "s {$5=n" |"} {print}' "$ROWS" >"$tmp" && mv "$tmp" "$ROWS"
}

# test_summary LOG: each test's last result in a pytest -v log (plain or xdist lines, and the short
# summary's), counted, and the failures listed
test_summary() {
  "$PY" - "$1" <<'PYEOF'
import re, sys
text = open(sys.argv[1], errors="replace").read()
last = {}
for m in re.finditer(r"(?m)(?:(PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS) (tests/\S+::\S+)|(tests/\S+::\S+) (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)\b)", text):
    last[m.group(2) or m.group(3)] = m.group(1) or m.group(4)
counts = {k: sum(v == k for v in last.values()) for k in ("PASSED", "FAILED", "ERROR", "SKIPPED", "XFAIL", "XPASS")}
done = re.search(r"(?m)^=+ .* in [0-9.]+s", text)
print("Tests (tests.log): " + ", ".join(f"{n} {k.lower()}" for k, n in counts.items() if n or k in ("PASSED", "FAILED"))
      + ("" if done else " (no final summary: the run was cut off)") + ".")
bad = sorted(t for t, v in last.items() if v in ("FAILED", "ERROR"))
if bad:
    print()
    print("\n".join(f"- {last[t]} {t}" for t in bad[:40]) + (f"\n- ... and {len(bad) - 40} more" if len(bad) > 40 else ""))
PYEOF
}

write_report() {
  {
    echo "# xsim GPU check"
    echo
    echo "$(date -u +%Y-%m-%dT%H:%M:%SZ), mode: $([[ $DRY == 1 ]] && echo 'dry run (no GPU call made)' || echo device), tree: $(if git rev-parse --short HEAD >/dev/null 2>&1; then git rev-parse --short HEAD; git diff --quiet HEAD || echo ' (+ uncommitted changes)'; else echo 'no git here'; fi | tr -d '\n'), .whl built from: $(head -1 .whl/SOURCE 2>/dev/null || echo '?'), host: $(uname -n), steps: $STEPS"
    echo
    echo "| step | status | seconds | log | note |"
    echo "| --- | --- | --- | --- | --- |"
    cat "$ROWS"
    echo
    [[ -f $OUT/tests.log ]] && test_summary "$OUT/tests.log" && echo
    compgen -G ".whl/warp_lang-*.whl" >/dev/null ||
      echo "Not covered: Warp and Newton, not in .whl/ (warp-lang 1.19.0's wheel is 149 MB, over the 64 MiB a call carries; bench/gpu_prepare.sh)."
    for log in "$OUT"/*.log; do
      [[ -e $log ]] || continue
      echo
      echo "## $(basename "$log") (last 60 lines)"
      echo
      echo '```'
      tail -n 60 "$log"
      echo '```'
    done
  } >"$REPORT"
  rm -f "$ROWS"
}

# ---- steps before the first GPU call ----
if [[ $DRY == 1 ]]; then
  step syntax check.log 10 bash -c 'for f in bench/gpu_check.sh bench/gpu_prepare.sh; do bash -n "$f" || exit 1; done'
  if compgen -G ".whl/*.whl" >/dev/null; then
    step wheels check.log 60 "$WHEEL_PY" bench/gpu_wheels.py .whl
    step pip-resolve check.log 120 "$WHEEL_PY" -m pip install -q --dry-run --no-index --no-deps --only-binary=:all: \
      --python-version 3.12 --implementation cp --platform manylinux_2_39_x86_64 --platform manylinux_2_28_x86_64 \
      --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --target "$(mktemp -d)" .whl/*.whl
  else
    record wheels "SKIPPED" 0 "" ".whl/ not prepared: run bash bench/gpu_prepare.sh (needs network)"
  fi
  # the device's test selection collects here (no GPU needed) and is not empty (pytest exits 5 if so)
  if [[ $COLLECT == 1 ]]; then
    step collect check.log 120 "$PY" "${PYTEST_CUDA[@]}" --collect-only -q -n 0
    rows_note collect "$(grep -Eo '[0-9]+/[0-9]+ tests collected' "$OUT/check.log" | tail -1)"
  fi
fi
if wanted install && [[ $DRY == 0 ]]; then
  step install install.log 60 "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" .whl/*.whl
fi
# the checkout's xsim/ first, for the tests and the benchmarks alike (env.log prints xsim.__file__); the
# wheels' packages after it
[[ $DRY == 0 ]] && export PYTHONPATH=$PWD:$SITE${PYTHONPATH:+:$PYTHONPATH}
for b in "${BENCHES[@]}"; do
  IFS='|' read -r name script flags limit <<<"$b"
  wanted "$name" || continue
  # shellcheck disable=SC2086 # flags split on purpose
  if ! msg=$(flags_accepted "$script" $flags 2>&1); then
    if [[ $msg == "no --device" ]]; then
      record "$name" "NOT COVERED" 0 "" "$script has no --device flag: it runs on the CPU only"
      continue
    fi
    record "$name" "FAIL (flags)" 0 "" "$script: ${msg//$'\n'/, } in --help"
    continue
  fi
  [[ $DRY == 1 ]] && record "$name" "dry: flags ok" 0 "" "$script $flags"
done
if [[ $DRY == 1 ]]; then
  write_report
  echo "report: $REPORT"
  exit $FAILED
fi

# ---- the device run: from here on the GPU is used ----
if wanted env; then
  step env env.log 30 bash -c "set -e; nvidia-smi; $PY -VV; $PY -c 'import sys, numpy, scipy, cuda.bindings, xsim
print(\"xsim\", xsim.__file__); print(\"numpy\", numpy.__version__, \"scipy\", scipy.__version__)
print(\"cuda-bindings\", cuda.bindings.__version__)
from cuda.bindings import nvrtc; print(\"nvrtc\", nvrtc.nvrtcVersion())
print(\"is_cuda_available\", xsim.is_cuda_available()); print(xsim.get_device(\"cuda:0\"))'"
fi
if wanted tests; then
  # every test marked cuda: the cuda:0 variants of the device/default_device fixtures and tests/cuda's
  step tests tests.log "${GPU_CHECK_TESTS_TIMEOUT:-240}" "$PY" "${PYTEST_CUDA[@]}" -v -n "$WORKERS"
fi
for b in "${BENCHES[@]}"; do
  IFS='|' read -r name script flags limit <<<"$b"
  wanted "$name" || continue
  grep -q "^| $name | NOT COVERED\|^| $name | FAIL" "$ROWS" && continue
  # shellcheck disable=SC2086
  step "$name" bench.log "$limit" "$PY" "$script" $flags
done
write_report
echo "report: $REPORT"
exit $FAILED
