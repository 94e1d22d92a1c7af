#!/usr/bin/env bash
# GPU checks with the device image's own Python (numpy 2, CuPy 14, Pillow, ONNX Runtime CPU),
# plus carried wheels for nvImageCodec: kernel/decoder tests, the fidelity report, throughput.
# Run from the repository root on the GPU machine:  bash scripts/device/gpu_quick.sh  (writes to $OUT)
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/backend:$PWD/client:$PWD/testkit:$PWD PYTHONUNBUFFERED=1
# nvImageCodec finds nvJPEG from the carried nvidia-nvjpeg wheel
export LD_LIBRARY_PATH=/tmp/site/nvidia/nvjpeg/lib:/tmp/site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/env.txt"
python3 -c "import cupy, numpy; print('cupy', cupy.__version__, 'numpy', numpy.__version__)" | tee -a "$OUT/env.txt"
timeout 300 python3 -m pytest tests/gpu -q -p no:cacheprovider -x --timeout 240 2>&1 | tee "$OUT/pytest-gpu.txt" | tail -15
timeout 360 python3 -m scripts.gpu_report --out "$OUT/gpu-report.md" ${REPORT_ARGS:-} > "$OUT/gpu-report.log" 2>&1; echo "report rc=$?"
tail -60 "$OUT/gpu-report.md"
