#!/usr/bin/env bash
# Ad-hoc A/B on the GPU machine (not committed): ab-old/tritonprep (HEAD~1) against backend/tritonprep.
set -u
export PATH=/tmp/device-env/bin:$PATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
[ -d /tmp/jpegs-500x375 ] || python3 -m scripts.bench_images --size 500x375 --count 256 --out /tmp/jpegs-500x375 2>&1 | tail -3
ls /tmp/jpegs-500x375 | wc -l
swap() {
  if [ "$1" = old ] && [ ! -d backend/tritonprep.new ]; then mv backend/tritonprep backend/tritonprep.new; cp -r ab-old/tritonprep backend/tritonprep; fi
  if [ "$1" = new ] && [ -d backend/tritonprep.new ]; then rm -rf backend/tritonprep; mv backend/tritonprep.new backend/tritonprep; fi
  grep -c gpu_graph_id backend/tritonprep/classifier/ort_cuda.py | sed "s/^/$1: gpu_graph_id lines /"
}
if [ "${AB_LONE:-1}" = 1 ]; then
for round in 1 2; do for v in old new; do
  swap $v
  python3 -m scripts.bench.lone_image --images /tmp/jpegs-500x375 --out "$OUT/lone-$v-$round.jsonl" --paths one_wait,network_b1 \
    --gaps-ms 0,3 --calls 500 2>&1 | grep -E "gap |rror" | sed "s/^/$v $round /"
done; done
fi
for v in ${AB_SERVERS:-old new old new}; do
  swap $v
  tritonprep serve --unrestricted --mps on --log-file /tmp/ab-triton-$v.log > /tmp/ab-serve-$v.log 2>&1 &
  pid=$!
  for i in $(seq 120); do python3 - <<'PY' && break
import sys, urllib.request
try:
    sys.exit(0 if urllib.request.urlopen("http://127.0.0.1:8000/v2/health/ready", timeout=1).status == 200 else 1)
except Exception:
    sys.exit(1)
PY
    sleep 0.5; done; echo "$v ready after ${i} polls"; tail -3 /tmp/ab-serve-$v.log
  for m in classify_fused classify; do
    python3 -m scripts.perf_sweep --images /tmp/jpegs-500x375 -m $m --batch 1 --concurrency 1 --measurement-interval 3000 \
      --out /tmp/ab-pa-$v-$m > /tmp/ab-pa-$v-$m.log 2>&1; grep -E "^grpc" /tmp/ab-pa-$v-$m.log | cut -c1-400 | sed "s/^/$v $m /"
    grep -q "^grpc" /tmp/ab-pa-$v-$m.log || tail -5 /tmp/ab-pa-$v-$m.log
  done
  kill -TERM $pid; wait $pid; echo "$v server exit $?"
done
swap new
ps aux | grep -E "tritonserver|mps" | grep -v grep | head -3
