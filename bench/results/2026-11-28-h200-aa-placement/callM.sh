mkdir -p $OUT/r
timeout 60 python3 -m pytest -q -s -m gpu -p no:cacheprovider tests/judge/test_gpu.py -k "placed" > $OUT/r/gpu_tests.log 2>&1
tail -n 2 $OUT/r/gpu_tests.log
rm -rf /tmp/kw_suite; mkdir -p /tmp/kw_suite
if [ -f suite.tgz ]; then tar xzf suite.tgz -C /tmp/kw_suite; R=--resume; else R=; fi
timeout -s INT -k 30 ${SUITE_STOP:-400} kernelwright bench --systems eager-copy --trials 1 --jobs 8 $R --out /tmp/kw_suite/suite > $OUT/r/suite.log 2>&1
tail -n 8 $OUT/r/suite.log
tar czf $OUT/suite.tgz -C /tmp/kw_suite suite
tar czf $OUT/r.tgz -C $OUT r
