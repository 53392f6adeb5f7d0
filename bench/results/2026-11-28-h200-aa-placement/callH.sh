# Copy to the repo root as callH.sh; run: bash scripts/gpu_session.sh sh "bash callH.sh" on nvidia-h200-x2.
# PYTHONHASHSEED=0 makes level2/28's A/A repeat per GPU (1.077/1.082 on GPU 0, 0.940 twice on GPU 1, session 32).
mkdir -p $OUT/r
CUDA_VISIBLE_DEVICES=1 timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -rfE tests/codegen/test_pointwise_gpu.py > $OUT/r/pointwise_gpu.log 2>&1 &
CUDA_VISIBLE_DEVICES=0 timeout 120 python3 -m pytest -q -s -m gpu -p no:cacheprovider tests/judge/test_gpu.py -k placement > $OUT/r/placement_test.log 2>&1
wait
run() { CUDA_VISIBLE_DEVICES=$1 timeout -s INT 100 kernelwright bench --systems eager-copy --trials 1 --filter 'level2/28_*' --out $OUT/r/$2 > $OUT/r/$2.log 2>&1; }
for mode in off on; do
  for g in 0 1; do ( PYTHONHASHSEED=0 KERNELWRIGHT_TIMING_PLACEMENT=$mode run $g ${mode}_$g ) & done; wait
done
tail -3 $OUT/r/placement_test.log $OUT/r/pointwise_gpu.log
for d in $OUT/r/*/; do python3 -c "
import json
r=json.load(open('$d/report.json'))
for x in r['rows']: print('$(basename $d)', x['speedup_vs_eager'], x['speedup_spread'], round(x['time_ms'],4), round(x['eager_ms'],4))
"; done
tar czf $OUT/r.tgz -C $OUT r
