#!/usr/bin/env bash
# Issue 26's GPU check: the same bench through the local pool and through a one-node Ray cluster on the
# lent GPU must give the same rows (problem, system, status, device) and the same report.
#
# Prepare here (never commit the wheels): python scripts/slim_ray_wheel.py   -> .whl/ (~40 MB of ray and
# its missing dependencies, beside the cutlass wheel). Then one device call, carrying .whl:
#   run(command="bash scripts/gpu_session.sh sh 'bash scripts/ray_gpu_check.sh'", carry=[".whl"])
# gpu_session.sh installs .whl/*.whl into /tmp/site (PYTHONPATH) and kernelwright itself.
#
# Both benches stop after CHECK_STOP seconds in all (default 480, inside a 600 s call) and resume: from
# the work folder an earlier call left on a still-warm machine, else from raycheck.tgz in the repo root
# (copy $OUT/raycheck.tgz back there before a call that may start a fresh machine). Call again until the
# script prints "ray check: done". CHECK_ARGS picks the work (default: the bundled level-1 suite, eager
# and kernelwright, 6 tasks at a time); e.g. CHECK_ARGS="--level 1 --filter level1/0* --systems
# eager,kernelwright --jobs 6".
set -uo pipefail
OUT="${OUT:-/tmp/kw_out}"
read -r -a ARGS <<< "${CHECK_ARGS:---level 1 --systems eager,kernelwright --jobs 6}"
WORK=/tmp/kw_raycheck
stop_at=$(( $(date +%s) + ${CHECK_STOP:-480} ))
if [ ! -d "$WORK" ] && [ -f raycheck.tgz ]; then mkdir -p "$WORK" && tar xzf raycheck.tgz -C "$WORK"; fi
mkdir -p "$WORK" "$OUT"
python3 -c "import ray; print('ray', ray.__version__)" || { echo "ray is not importable: carry .whl"; exit 1; }

bench() {  # bench NAME [--ray ADDRESS]: run or resume one bench until stop_at; 0 when it finished
  local name=$1; shift
  local left=$(( stop_at - $(date +%s) )) resume=()
  [ "$left" -gt 30 ] || return 1
  [ -f "$WORK/$name/results.jsonl" ] && resume=(--resume)
  timeout -s INT -k 30 "$left" kernelwright bench "${ARGS[@]}" "${resume[@]}" --out "$WORK/$name" "$@" \
    > "$OUT/$name.log" 2>&1
  local rc=$?
  tail -5 "$OUT/$name.log"
  [ "$rc" -eq 0 ] && ! grep -q "time budget spent" "$OUT/$name.log"
}

status=incomplete
if bench local; then
  # A one-node cluster, stopped through its own `ray start --block` process (nothing else is killed).
  python3 -m ray.scripts.scripts start --head --block --port 6379 --num-gpus 1 --include-dashboard=false \
    --disable-usage-stats > "$OUT/ray_head.log" 2>&1 &
  head_pid=$!
  for _ in $(seq 60); do grep -q "Ray runtime started" "$OUT/ray_head.log" && break; sleep 2; done
  # `auto`: the cluster `ray start` started on this machine (an explicit HOST:PORT would need
  # RAY_AUTH_MODE=token for Ray's token authentication).
  bench ray --ray auto && status=done
  kill -TERM "$head_pid"; wait "$head_pid"
fi
tar czf "$OUT/raycheck.tgz" -C "$WORK" .

if [ "$status" = done ]; then
  kernelwright report "$WORK/ray" --compare "$WORK/local" -o "$OUT/compare.md" > /dev/null
  cp "$WORK/ray/report.md" "$OUT/report_ray.md"; cp "$WORK/local/report.md" "$OUT/report_local.md"
  python3 - "$WORK/local" "$WORK/ray" <<'EOF'
import sys
from kernelwright.bench.store import ResultsStore

local, ray = ({(r["problem"], r["system"]): r for r in ResultsStore(d).latest_rows()} for d in sys.argv[1:])
print(f"rows: local {len(local)}, ray {len(ray)}; same keys: {set(local) == set(ray)}")
differ = [(k, local[k]["status"], ray[k]["status"]) for k in sorted(set(local) & set(ray))
          if (local[k]["status"], local[k]["device"]) != (ray[k]["status"], ray[k]["device"])]
for key, a, b in differ:
    print(f"  {key[0]} {key[1]}: local {a}, ray {b}")
print(f"status and device equal on {len(set(local) & set(ray)) - len(differ)} of {len(set(local) | set(ray))}")
EOF
  sed -n 1,40p "$OUT/compare.md"
fi
echo "ray check: $status (results in \$OUT/raycheck.tgz)"
