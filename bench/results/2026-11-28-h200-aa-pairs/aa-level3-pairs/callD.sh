mkdir -p $OUT/r
timeout -s INT -k 20 330 kernelwright bench --systems eager-copy --trials 1 --jobs 8 --level 3 --out /tmp/l3 > $OUT/r/l3.log 2>&1
cp /tmp/l3/results.jsonl $OUT/r/l3.jsonl; cp /tmp/l3/run.json $OUT/r/l3_run.json
tail -n 30 $OUT/r/l3.log
python3 - <<'P'
import json
for l in open("/tmp/l3/results.jsonl"):
    r=json.loads(l); v=r["verdict"]
    print(r["problem"], r["speedup_vs_eager"], r["speedup_spread"], r["gpu_busy_share"], v.get("speedup_vs_eager_pairs"), v["profile"].get("timing_pairs_s"), r["seconds"])
P
