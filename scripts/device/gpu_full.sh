#!/usr/bin/env bash
# Everything GPU in one command, in the isolated venv that ../shared/device/stage-wheels builds
# (numpy 1.26 + CuPy 13.6 + nvImageCodec + the pytriton server + perf_analyzer + DALI):
#   1. the GPU test suite (tests/gpu: kernels, decoder, executor, the real server on the GPU)
#      and the e2e suite against the GPU-backed server;
#   2. with SOAK_REQUESTS=N: the hostile-traffic soak (scripts/soak.py) against the GPU server,
#      with OVERLOAD=1 also scripts/overload.py (10x overload), figures as JSON in $OUT;
#   3. the benchmark harness (python -m scripts.bench.harness, PLAN=quick|full, HARNESS_ARGS=...).
# Run after the last batch's take.sh, from the repository root; results go to $OUT.
# Wheels (staged here with ../shared/device/stage-wheels, one device call per batch):
#   'nvidia-pytriton==0.7.0' 'cupy-cuda13x==13.6.0' fastrlock 'numpy==1.26.4' 'nvidia-nvimgcodec-cu13==0.9.0.20'
#   'perf-analyzer==2.60.0' 'tritonclient==2.73.0' python-rapidjson grpcio 'protobuf>=6.30,<7' typing_extensions
#   packaging urllib3 'pillow==12.0.0' pytest pluggy iniconfig pytest-timeout onnxruntime flatbuffers coloredlogs
#   humanfriendly geventhttpclient gevent greenlet zope.event zope.interface certifi brotli
#   'opencv-python-headless==4.10.0.84' (the cv2_linear tests compare the kernel with OpenCV itself)
#   and for the DALI comparison: 'nvidia-dali-cuda130==2.4.0' 'nvidia-libnvcomp-cu13==5.3.0.16' astunparse gast six
#   optree makefun 'libcst~=1.8' pyyaml nvtx
# Carry model_repository/classifier/1/model.onnx and model_repository/embedder/1/model.onnx (make model; the
# server loads both) and .photos (python -m scripts.bench_images --export-photos
# --out .photos) with the last batch.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SITE=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
printf '%s\n' "$PWD/backend" "$PWD/client" "$PWD/testkit" "$PWD" > "$SITE/tritonprep-src.pth"  # the stub ignores PYTHONPATH
# pure-Python or numpy-1-compatible test/client dependencies the image already has
for m in pygments ml_dtypes; do [ -e "$SITE/$m" ] || ln -s "/opt/torch/.venv/lib/python3.12/site-packages/$m" "$SITE/$m"; done
export TRITONPREP_PHOTOS=${TRITONPREP_PHOTOS:-$PWD/.photos} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/env.txt"
python3 -c "import numpy, cupy, PIL; print('numpy', numpy.__version__, 'cupy', cupy.__version__, 'Pillow', PIL.__version__)" | tee -a "$OUT/env.txt"
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  timeout ${TEST_TIMEOUT:-240} python3 -m pytest tests/gpu tests/e2e/test_classify.py ${TEST_EXTRA:-} -q -p no:cacheprovider --timeout 200 -rsP \
    > "$OUT/pytest-gpu.txt" 2>&1; echo "pytest rc=$?"; tail -6 "$OUT/pytest-gpu.txt"
fi
if [ "${SOAK_REQUESTS:-0}" -gt 0 ]; then
  timeout ${SOAK_TIMEOUT:-300} python3 -m scripts.soak --requests "$SOAK_REQUESTS" --clients ${SOAK_CLIENTS:-8} \
    ${SOAK_ARGS:-} --progress 30 --max-seconds $(( ${SOAK_TIMEOUT:-300} - 45 )) --json "$OUT/soak-gpu.json" > "$OUT/soak-gpu.txt" 2>&1; echo "soak rc=$?"; tail -30 "$OUT/soak-gpu.txt"
fi
if [ "${OVERLOAD:-0}" = 1 ]; then
  timeout ${OVERLOAD_TIMEOUT:-150} python3 -m scripts.overload --model preprocess --json "$OUT/overload-gpu.json" \
    > "$OUT/overload-gpu.txt" 2>&1; echo "overload rc=$?"; tail -25 "$OUT/overload-gpu.txt"
fi
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  # at most 8 files come back from $OUT: work in /tmp, copy the results, pack the server logs
  timeout ${BENCH_TIMEOUT:-480} python3 -m scripts.bench.harness --out /tmp/bench --plan "${PLAN:-quick}" --phase "${PHASE:-all}" ${HARNESS_ARGS:-} \
    > "$OUT/harness.log" 2>&1; echo "harness rc=$?"
  tail -40 "$OUT/harness.log"
  cp /tmp/bench/results.md /tmp/bench/results.csv /tmp/bench/summary.json /tmp/bench/*.png "$OUT"/ 2>/dev/null
  (cd /tmp/bench && tar czf "$OUT/logs.tgz" *.log perf 2>/dev/null)
fi
