mkdir -p $OUT/r
for rep in 1 2; do
  timeout -s INT -k 20 110 kernelwright bench --systems eager-copy --trials 1 --jobs 1 --filter 'level3/13*,level3/15*,level3/17*' --out /tmp/alone$rep > $OUT/r/alone$rep.log 2>&1
  cp /tmp/alone$rep/results.jsonl $OUT/r/alone$rep.jsonl
done
timeout -s INT -k 20 ${SUITE_STOP:-250} kernelwright bench --systems eager-copy --trials 1 --jobs 8 --level 3 --out /tmp/l3 > $OUT/r/l3.log 2>&1
cp /tmp/l3/results.jsonl $OUT/r/l3.jsonl
tail -n 4 $OUT/r/*.log
tar czf $OUT/r.tgz -C $OUT r
