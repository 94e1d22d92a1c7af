"""Client library: send encoded images to the tritonprep ensembles, get predictions and embeddings back.

One class, :class:`ClassifyClient`, serves both of Triton's protocols; the protocol
differences live in two small adapters over ``tritonclient.grpc`` and ``tritonclient.http``.
Images travel as they are on disk (JPEG, PNG, ...) in a BYTES tensor of shape ``[n, 1]``
with ``binary_data`` on, the way NVIDIA's ``ensemble_image_client.py`` sends them.

The ensembles: ``classify`` (top-k ImageNet classes), ``embed`` (an L2-normalised embedding) and
``analyze`` (both, from one decode). ``embed`` and ``analyze`` also offer provenance outputs per
image (the decoded size, the decoder path, the scale and borders of each network input), fetched
only on request (:class:`Provenance`); ``classify``, the main path, carries none (an ensemble would
build them for every request). :meth:`ClassifyClient.infer_each` sends images in multi-image requests and
still gives every image its own answer: when a request fails because of one image (the server
names it in the per-image error contract, :mod:`tritonprep.image_errors`), that image gets the error
and the others are sent again without it.

The client spreads its requests over several connections and sends a request again when its server went
away, its model instance failed or the server refused it for overload: :mod:`.connections` owns the
connections, :mod:`.retry` what is retried and how long.
"""

from __future__ import annotations

import http.client
import importlib
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, TypeVar

import numpy as np
from tritonclient.utils import InferenceServerException

from .connections import GrpcConnections, HttpConnections, default_connections
from .errors import ClientError, InferenceFailed, ServerUnavailable, WrongProtocol
from .retry import SERVER_GONE, Retrier, RetriesExhausted, RetryCounts, RetryPolicy, error_text, retry_cause

T = TypeVar("T")

INPUT = "IMAGE"
OUTPUTS = ("SCORES", "CLASS_IDS", "LABELS")
EMBEDDING = "EMBEDDING"
#: provenance outputs: these two, and <network input>_SCALE / _PADDING for each network input
PROVENANCE = ("ORIGINAL_SIZE", "DECODER")
PROVENANCE_SUFFIXES = ("_SCALE", "_PADDING")


@dataclass(frozen=True)
class Prediction:
    """One class of one image: ImageNet index, name and softmax probability."""

    index: int
    label: str
    score: float

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"index": self.index, "label": self.label, "score": round(self.score, 6)}


@dataclass(frozen=True)
class Provenance:
    """How the server decoded and transformed one image.

    ``transforms[input] = (scale_x, scale_y, left, top, right, bottom)`` for each network input
    (e.g. ``PIXELS``): a point at ``(x, y)`` in that input maps to ``((x - left) / scale_x,
    (y - top) / scale_y)`` in the original (upright) image; negative borders were cropped away.
    """

    width: int
    height: int
    decoder: str  # gpu_hw, gpu_cuda, cpu_fallback or cpu
    transforms: dict[str, tuple[float, float, int, int, int, int]] = field(default_factory=dict)

    def to_original(self, name: str, x: float, y: float) -> tuple[float, float]:
        """Map a point of network input ``name`` (a box corner, say) back to the original image's pixels."""
        sx, sy, left, top, _, _ = self.transforms[name]
        return (x - left) / sx, (y - top) / sy

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "width": self.width,
            "height": self.height,
            "decoder": self.decoder,
            **{
                name: {"scale": [round(t[0], 6), round(t[1], 6)], "padding": list(t[2:])}
                for name, t in self.transforms.items()
            },
        }


@dataclass
class ImageResult:
    """What the server returned for one image: predictions, embedding and provenance, as requested."""

    predictions: list[Prediction] | None = None
    embedding: np.ndarray | None = None
    provenance: Provenance | None = None


def is_provenance(name: str) -> bool:
    """Whether an output name is a provenance output."""
    return name in PROVENANCE or name.endswith(PROVENANCE_SUFFIXES)


def parse_url(url: str | None, protocol: str | None) -> tuple[str, str]:
    """Resolve ``(protocol, host:port)`` from a URL such as ``grpc://h:8001``, ``http://h:8000`` or ``h:8001``."""
    if url and "://" in url:
        scheme, _, rest = url.partition("://")
        scheme = scheme.lower()
        if scheme not in ("grpc", "http"):
            raise ClientError(f"unsupported URL scheme {scheme!r} in {url!r}: use grpc:// or http://")
        if protocol and protocol != scheme:
            raise ClientError(f"--protocol {protocol} contradicts the URL {url!r}")
        return scheme, rest.rstrip("/")
    protocol = (protocol or "grpc").lower()
    if protocol not in ("grpc", "http"):
        raise ClientError(f"protocol must be grpc or http, got {protocol!r}")
    return protocol, url or ("localhost:8001" if protocol == "grpc" else "localhost:8000")


def images_array(images: Sequence[bytes]) -> np.ndarray:
    """The BYTES array of a request: shape ``[n, 1]``, one encoded image (any size) per row."""
    arr = np.empty((len(images), 1), dtype=np.object_)
    for i, data in enumerate(images):
        arr[i, 0] = data
    return arr


def image_input(images: Sequence[bytes], protocol: str | ModuleType = "grpc", name: str = INPUT) -> Any:
    """A tritonclient ``InferInput`` carrying ``images`` as BYTES ``[n, 1]`` (binary data over HTTP).

    ``protocol`` is ``"grpc"`` or ``"http"`` (or the ``tritonclient.grpc`` / ``tritonclient.http``
    module itself), as in ``client.infer("classify", [image_input(jpegs)])``.
    """
    if isinstance(protocol, str):
        if protocol not in ("grpc", "http"):
            raise ClientError(f"protocol must be grpc or http, got {protocol!r}")
        module = importlib.import_module(f"tritonclient.{protocol}")
    else:
        module = protocol
    arr = images_array(images)
    inp = module.InferInput(name, list(arr.shape), "BYTES")
    if module.__name__.endswith("http"):
        inp.set_data_from_numpy(arr, binary_data=True)
    else:
        inp.set_data_from_numpy(arr)
    return inp


class ClassifyClient:
    """Classify encoded images with the ``classify`` ensemble over gRPC or HTTP.

    >>> with ClassifyClient("localhost:8001") as client:          # doctest: +SKIP
    ...     client.classify([open("cat.jpg", "rb").read()])[0][0].label
    'Egyptian cat'
    """

    def __init__(
        self,
        url: str | None = None,
        protocol: str | None = None,
        *,
        model: str = "classify",
        timeout_s: float = 60.0,
        concurrency: int = 8,
        ssl: bool = False,
        connections: int | None = None,
        retry: RetryPolicy | int | None = None,
    ) -> None:
        """``connections``: gRPC connections to spread requests over (default: one per request in flight, at
        most 16; HTTP has one per request in flight). ``retry``: a :class:`RetryPolicy`, a number of retries
        per request with the default timing, or 0 for none (default: ``RetryPolicy()``)."""
        self.protocol, self.target = parse_url(url, protocol)
        #: exceptions that tritonclient and the sockets under it raise for a failed call
        self.errors: tuple[type[BaseException], ...] = (
            InferenceServerException,
            OSError,
            ValueError,
            KeyError,
            http.client.HTTPException,
            RetriesExhausted,
        )
        self.model = model
        self.concurrency = max(1, concurrency)
        self._retrier = Retrier(RetryPolicy.of(retry))
        try:
            self._impl: GrpcConnections | HttpConnections = (
                GrpcConnections(self.target, timeout_s, connections or default_connections(self.concurrency), ssl)
                if self.protocol == "grpc"
                else HttpConnections(self.target, timeout_s, self.concurrency, ssl)
            )
        except ImportError as e:
            raise ClientError(f"tritonclient is not installed: pip install 'tritonprep[client]' ({e})") from None
        except (ValueError, OSError) as e:
            raise ServerUnavailable(f"cannot set up a {self.protocol} client for {self.target}: {e}") from None

    @property
    def retry(self) -> RetryPolicy:
        """How failed requests are sent again."""
        return self._retrier.policy

    @property
    def retries(self) -> RetryCounts:
        """How many requests were sent again so far, by cause (``str()``: ``9 server gone, 3 overloaded``)."""
        return self._retrier.counts

    @property
    def connections(self) -> int:
        """How many connections requests are spread over."""
        return self._impl.connections

    # ------------------------------------------------------------------ helpers
    def _is_connection_error(self, e: BaseException) -> bool:
        text = error_text(e).lower()
        return (
            isinstance(e, (ConnectionError, OSError))
            or retry_cause(e) == SERVER_GONE
            or any(
                s in text
                for s in (
                    "unavailable",
                    "connection refused",
                    "failed to connect",
                    "connect failed",
                    "name resolution",
                    "socket closed",
                    "connection reset",
                    "server is stopping",
                )
            )
        )

    def _hint(self) -> str:
        """A word on the usual ports when the URL's port is the other protocol's default."""
        port = self.target.rpartition(":")[2]
        if self.protocol == "grpc" and port == "8000":
            return f" (8000 is usually Triton's HTTP port: use http://{self.target} or the gRPC port, 8001)"
        return ""

    def _wrap(self, e: BaseException) -> ClientError:
        if isinstance(e, ClientError):
            return e
        suffix = ""
        if isinstance(e, RetriesExhausted):
            suffix = f" (still failing after {e.retries} retries in {e.elapsed_s:.1f} s)"
            e = e.error
        if isinstance(e, http.client.HTTPException) and type(e).__name__ != "HTTPConnectionClosed":
            reason = e.args[0] if e.args and isinstance(e.args[0], str) else error_text(e)
            return WrongProtocol(
                f"{self.target} does not speak HTTP (its answer is no HTTP response: {reason}); is it Triton's gRPC "
                f"port (8001 by default)? Use grpc://{self.target}, or the HTTP port (8000 by default)"
            )
        if self._is_connection_error(e):
            return ServerUnavailable(
                f"cannot reach Triton at {self.target} over {self.protocol}: {error_text(e)}{suffix}{self._hint()}"
            )
        failure = InferenceFailed.from_server(error_text(e))
        return InferenceFailed(f"{failure}{suffix}", failure.image) if suffix else failure

    def _call(self, send: Callable[[], T]) -> T:
        """``send()`` with this client's retries; a failure that remains is raised as a :class:`ClientError`."""
        try:
            return self._retrier.call(send)
        except self.errors as e:
            raise self._wrap(e) from None

    def _provenance(self, result: Any, n: int, names: Sequence[str]) -> list[Provenance]:
        size = result.as_numpy("ORIGINAL_SIZE").reshape(n, 2)
        decoder = result.as_numpy("DECODER").reshape(n)
        inputs = sorted({name[: -len("_SCALE")] for name in names if name.endswith("_SCALE")})
        scales = {i: result.as_numpy(f"{i}_SCALE").reshape(n, 2) for i in inputs}
        pads = {i: result.as_numpy(f"{i}_PADDING").reshape(n, 4) for i in inputs}
        return [
            Provenance(
                int(size[k, 0]),
                int(size[k, 1]),
                decoder[k].decode("utf-8", "replace"),
                {i: (float(scales[i][k, 0]), float(scales[i][k, 1]), *(int(v) for v in pads[i][k])) for i in inputs},
            )
            for k in range(n)
        ]

    def _results(self, result: Any, n: int, names: Sequence[str], top_k: int | None) -> list[ImageResult]:
        """One :class:`ImageResult` per image of a response that carries the outputs ``names``."""
        out = [ImageResult() for _ in range(n)]
        if "SCORES" in names:
            for r, p in zip(out, self._predictions(result, n, top_k)):
                r.predictions = p
        if EMBEDDING in names:
            emb = result.as_numpy(EMBEDDING).reshape(n, -1)
            for r, e in zip(out, emb):
                r.embedding = e
        if "ORIGINAL_SIZE" in names:
            for r, p in zip(out, self._provenance(result, n, names)):
                r.provenance = p
        return out

    def _predictions(self, result: Any, n: int, top_k: int | None) -> list[list[Prediction]]:
        scores = result.as_numpy("SCORES").reshape(n, -1)
        ids = result.as_numpy("CLASS_IDS").reshape(n, -1)
        labels = result.as_numpy("LABELS").reshape(n, -1)
        k = scores.shape[1] if top_k is None else min(top_k, scores.shape[1])
        return [
            [Prediction(int(ids[i, j]), labels[i, j].decode("utf-8", "replace"), float(scores[i, j])) for j in range(k)]
            for i in range(n)
        ]

    # ------------------------------------------------------------------ API
    def check_server(self) -> None:
        """Raise :class:`ServerUnavailable` unless the server answers."""
        try:
            if not self._impl.live():
                raise ServerUnavailable(f"Triton at {self.target} is not live")
        except self.errors as e:
            raise self._wrap(e) from None

    def outputs(self, model: str | None = None) -> dict[str, list[int]]:
        """``{output name: shape}`` of ``model`` (default: this client's model), from the server's metadata."""
        try:
            return {o["name"]: o["shape"] for o in self._impl.metadata(model or self.model)["outputs"]}
        except self.errors as e:
            raise self._wrap(e) from None

    def max_top_k(self) -> int:
        """How many predictions per image the server returns (the ``SCORES`` dims)."""
        outputs = self.outputs()
        if "SCORES" not in outputs:
            raise ClientError(f"model {self.model!r} has no SCORES output; is it the tritonprep classify ensemble?")
        return int(outputs["SCORES"][-1])

    def output_names(self, *, predictions: bool, embedding: bool, provenance: bool) -> list[str]:
        """The outputs of this client's model to request, checked against what the model offers."""
        offered = self.outputs()
        wanted = [*(OUTPUTS if predictions else ()), *((EMBEDDING,) if embedding else ())]
        missing = [n for n in wanted if n not in offered]
        if missing:
            raise ClientError(f"model {self.model!r} has no output {', '.join(missing)} (it offers {sorted(offered)})")
        if provenance:
            names = [n for n in offered if is_provenance(n)]
            if not set(PROVENANCE) <= set(names):
                raise ClientError(f"model {self.model!r} offers no provenance outputs (ORIGINAL_SIZE, DECODER)")
            wanted += names
        return wanted

    def classify(self, images: Sequence[bytes], top_k: int | None = None) -> list[list[Prediction]]:
        """Classify ``images`` in one request; the whole request fails if one image is bad."""
        if not images:
            return []
        inputs, outputs = [image_input(images, self._impl.m)], self._impl.outputs(OUTPUTS)
        result = self._call(lambda: self._impl.infer(self.model, inputs, outputs))
        return self._predictions(result, len(images), top_k)

    def classify_each(
        self, images: Sequence[bytes], top_k: int | None = None
    ) -> Iterator[tuple[int, list[Prediction] | ClientError]]:
        """Classify each image in its own request, ``concurrency`` in flight.

        Yields ``(index, result)`` in completion order; ``result`` is the image's
        predictions or its :class:`ClientError`. One bad image fails only itself.
        """
        for i, result in self.infer_each(images, OUTPUTS, top_k=top_k, batch_size=1):
            yield i, result if isinstance(result, ClientError) else result.predictions  # type: ignore[misc]

    def embed(self, images: Sequence[bytes], model: str = "embed") -> np.ndarray:
        """Embed ``images`` in one request: float32 ``[n, 1280]`` unit vectors (the request fails if one image is
        bad)."""
        if not images:
            return np.zeros((0, 0), np.float32)
        inputs, outputs = [image_input(images, self._impl.m)], self._impl.outputs([EMBEDDING])
        result = self._call(lambda: self._impl.infer(model, inputs, outputs))
        return result.as_numpy(EMBEDDING).reshape(len(images), -1).astype(np.float32, copy=False)

    def infer_each(
        self,
        images: Sequence[bytes],
        outputs: Sequence[str],
        *,
        top_k: int | None = None,
        batch_size: int = 8,
    ) -> Iterator[tuple[int, ImageResult | ClientError]]:
        """Run this client's model on every image, up to ``batch_size`` images per request, ``concurrency``
        requests in flight; yields ``(index, result)`` in completion order, one per image.

        One bad image fails only itself: the server fails a request at its first bad image and names it
        (``image k of n [reason]: ...``), so that image gets the error (its message, ``image`` set) and the
        request's other images are sent again without it, until every image has an answer. A request that
        failed for its server (gone, a failed instance, overload) is sent again as :attr:`retry` allows; a
        failure that remains is the answer of each of its images.
        """
        if batch_size < 1:
            raise ClientError(f"batch_size must be at least 1, got {batch_size}")
        finished: queue.Queue[tuple[int, ImageResult | ClientError]] = queue.Queue()
        slots = threading.Semaphore(self.concurrency)
        pending: queue.Queue[list[int] | None] = queue.Queue()
        for start in range(0, len(images), batch_size):
            pending.put(list(range(start, min(start + batch_size, len(images)))))
        outstanding = [len(images)]  # images without an answer yet
        lock = threading.Lock()

        def answer(i: int, result: ImageResult | ClientError) -> None:
            finished.put((i, result))
            with lock:
                outstanding[0] -= 1
                if outstanding[0] == 0:
                    pending.put(None)  # wake the submitter: nothing left

        def done(group: list[int], result: Any, error: BaseException | None) -> None:
            try:
                if error is None:
                    results = self._results(result, len(group), outputs, top_k)
                    for i, r in zip(group, results):
                        answer(i, r)
                    return
                failure = self._wrap(error)
                image = failure.image if isinstance(failure, InferenceFailed) else None
                if image is not None and image.count == len(group):
                    bad = group[image.index]
                    answer(bad, InferenceFailed(image.message, image))  # its own answer: no position
                    if len(group) > 1:
                        pending.put([i for i in group if i != bad])  # the others again, without it
                else:
                    for i in group:
                        answer(i, failure)
            except Exception as e:  # noqa: BLE001 - a malformed result: every image still gets an answer
                for i in group:
                    answer(i, self._wrap(e))
            finally:
                slots.release()

        def submit_all() -> None:
            while True:
                group = pending.get()
                if group is None:
                    return
                slots.acquire()
                inputs = [image_input([images[i] for i in group], self._impl.m)]
                requested = self._impl.outputs(outputs)
                self._retrier.submit(
                    lambda callback, inputs=inputs, requested=requested: self._impl.submit(
                        self.model, inputs, requested, callback
                    ),
                    lambda result, error, group=group: done(group, result, error),
                )

        if not images:
            return
        threading.Thread(target=submit_all, name="tritonprep-submit", daemon=True).start()
        try:
            for _ in range(len(images)):
                yield finished.get()
        finally:  # also when the caller stops early: the submitter stops sending
            pending.put(None)

    def preprocess(self, images: Sequence[bytes], model: str = "preprocess", output: str = "PIXELS") -> np.ndarray:
        """Call the preprocess model directly and return the network input it produces."""
        inputs, requested = [image_input(images, self._impl.m)], self._impl.outputs([output])
        result = self._call(lambda: self._impl.infer(model, inputs, requested))
        return result.as_numpy(output)

    def close(self) -> None:
        """Close the connections (requests that wait for a retry end with their last error)."""
        self._retrier.close()
        self._impl.close()

    def __enter__(self) -> ClassifyClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
