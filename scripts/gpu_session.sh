#!/usr/bin/env bash
# One call on the lent GPU machine: install kernelwright (no network there: carried wheels in .whl/),
# then run the requested stages, logging everything under $OUT so it comes back.
#   bash scripts/gpu_session.sh tests FILE...    # pytest -m "gpu and not slow" (TEST_MARK=gpu: the slow ones too)
#   bash scripts/gpu_session.sh kernels          # kernel-family benchmarks (bench/kernels/*.py)
#   bash scripts/gpu_session.sh suite [ARGS...]  # kernelwright bench on the bundled suite (over several
#                                                # calls: pass --time-budget S well under SUITE_STOP, so that
#                                                # the bench starts no task after S s and none is cut)
#   bash scripts/gpu_session.sh suite-start [ARGS...]  # the bench on the bundled suite in one piece, across
#   bash scripts/gpu_session.sh suite-wait             # calls: started in its own process session, which
#                                                # outlives the call while the machine stays held, on a copy
#                                                # of this tree; each call waits up to SUITE_WAIT s (default
#                                                # 540) and brings back the rows so far (suite-wait does no
#                                                # setup: nothing of it runs beside the bench's timings).
#                                                # Issue the next call at once (the machine goes back after
#                                                # idle_release_s), until "suite finished"
#   bash scripts/gpu_session.sh profile PROBLEM...  # each problem optimized (cache kept), then its forward
#                                                # under Nsight Compute for eager, torch.compile and the
#                                                # file (scripts/profile_kernels.py): $OUT/profile.tgz
#   bash scripts/gpu_session.sh sh 'COMMANDS'    # any commands, in this environment (installed, PYTHONPATH)
# The suite stage resumes from suite.tgz in the repo root when there is one (a previous call's result,
# carried back in), and leaves $OUT/suite.tgz: a run can span several calls on fresh machines.
set -uo pipefail
call_started=$(date +%s)
export PYTHONUNBUFFERED=1 OUT="${OUT:-/tmp/kw_out}"
mkdir -p "$OUT"
detached=/tmp/kw_detached

# Wait for the detached bench (suite-start) up to SUITE_WAIT s from this call's start, bring back what it has
# written so far, and exit with its status once it has ended (else 0).
wait_for_suite() {
  until [ -f "$detached/rc" ] || [ $(( $(date +%s) - call_started )) -ge "${SUITE_WAIT:-540}" ]; do sleep 5; done
  local elapsed=$(( $(cat "$detached/ended" 2>/dev/null || date +%s) - $(cat "$detached/started") ))
  for f in results.jsonl run.json report.md report.json locks.jsonl; do
    [ -f "$detached/suite/$f" ] && cp "$detached/suite/$f" "$OUT/"
  done
  [ -f "$OUT/locks.jsonl" ] && gzip -f "$OUT/locks.jsonl"
  [ -d "$detached/suite/logs" ] && tar czf "$OUT/logs.tgz" -C "$detached/suite" logs
  cp "$detached/bench.log" "$OUT/suite.log"
  tail -c 3000 "$detached/bench.log"
  if [ -f "$detached/rc" ]; then
    echo "suite finished in ${elapsed} s (exit $(cat "$detached/rc"))"
    exit "$(cat "$detached/rc")"
  fi
  echo "suite running for ${elapsed} s: $(wc -l < "$detached/suite/results.jsonl" 2>/dev/null || echo 0) rows so far"
  exit 0
}

if [ "${1:-}" = suite-wait ]; then
  [ -f "$detached/started" ] || { echo "no suite started on this machine (a fresh one: run suite-start)"; exit 1; }
  wait_for_suite
fi
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
python3 -m pip install -q --no-deps --no-build-isolation -e . >/tmp/kw_install.log 2>&1 || { cat /tmp/kw_install.log; exit 1; }
export KERNELWRIGHT_CACHE="${KERNELWRIGHT_CACHE:-/tmp/kw_cache}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
kernelwright doctor

stage="${1:-tests}"; shift || true
case "$stage" in
  tests)
    # One pytest process per file, each under a wall-clock cap, so a hung kernel costs one file only.
    cap="${TEST_FILE_CAP:-480}"   # tests/test_optimize_gpu.py runs many optimizes: over 200 s
    for file in "$@"; do
      log="$OUT/$(echo "$file" | tr '/' '_' | sed 's/\.py$//').log"
      timeout -k 10 "$cap" python3 -m pytest -q -m "${TEST_MARK:-gpu and not slow}" -p no:cacheprovider -rfE "$file" >"$log" 2>&1
      echo "== $file: exit $? | $(tail -1 "$log")"
    done ;;
  kernels)
    for script in bench/kernels/bench_*.py; do
      name=$(basename "$script" .py)
      python3 "$script" "$OUT/$name.json" 2>&1 | tee "$OUT/$name.log" | tail -25
    done ;;
  suite)
    # SUITE_RESUME=warm: resume from the previous call's folder on this (still warm) machine, so nothing
    # has to be carried back and forth between calls; else from suite.tgz when there is one.
    resume=()
    if [ "${SUITE_RESUME:-}" = warm ] && [ -d /tmp/kw_suite/suite ]; then
      resume=(--resume)
    else
      rm -rf /tmp/kw_suite
      if [ -f suite.tgz ]; then mkdir -p /tmp/kw_suite && tar xzf suite.tgz -C /tmp/kw_suite && resume=(--resume); fi
    fi
    # SUITE_STOP: seconds after which the bench is interrupted (its finished rows are kept), so that the
    # tarball below is written before the call's limit.
    timeout -s INT -k 30 "${SUITE_STOP:-100000}" kernelwright bench "$@" "${resume[@]}" --out /tmp/kw_suite/suite 2>&1 \
      | tee "$OUT/suite.log" | tail -60
    tar czf "$OUT/suite.tgz" -C /tmp/kw_suite suite ;;
  suite-start)
    if [ -f "$detached/pid" ] && kill -0 "$(cat "$detached/pid")" 2>/dev/null; then
      echo "a suite is still running on this machine (pid $(cat "$detached/pid")): suite-wait"; exit 1
    fi
    rm -rf "$detached" && mkdir -p "$detached/tree"
    # the bench imports this copy (PYTHONPATH comes before the editable install), so that a later call's
    # tree, copied over this one, changes nothing under the running bench
    tar cf - --exclude=./.git --exclude=./.whl . | tar xf - -C "$detached/tree"
    date +%s > "$detached/started"
    # setsid: a process session of its own, so the bench is not ended with this call; its output goes to
    # bench.log, and nothing of it holds this call's output open
    PYTHONPATH="$detached/tree${PYTHONPATH:+:$PYTHONPATH}" setsid bash -c \
      'kernelwright bench "$@" --out '"$detached"'/suite > '"$detached"'/bench.log 2>&1; rc=$?
       date +%s > '"$detached"'/ended; echo $rc > '"$detached"'/rc' bench "$@" < /dev/null > /dev/null 2>&1 &
    echo $! > "$detached/pid"
    wait_for_suite ;;
  profile)
    mkdir -p /tmp/kw_profile
    for problem in "$@"; do
      name=$(basename "$problem" .py)
      timeout -k 10 "${PROFILE_OPTIMIZE_CAP:-300}" kernelwright optimize "$problem" -o "/tmp/kw_profile/$name.py" \
        --force >"/tmp/kw_profile/$name.optimize.log" 2>&1
      timeout -k 10 "${PROFILE_CAP:-300}" python3 scripts/profile_kernels.py "/tmp/kw_profile/$name" "$problem" \
        $( [ -f "/tmp/kw_profile/$name.py" ] && echo "/tmp/kw_profile/$name.py" ) | tail -40
    done
    tar czf "$OUT/profile.tgz" -C /tmp kw_profile ;;
  sh)
    bash -c "$1" ;;
  *)
    echo "unknown stage $stage"; exit 2 ;;
esac
