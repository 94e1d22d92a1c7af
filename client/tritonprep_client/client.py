"""Client library: send encoded images to the ``classify`` ensemble, get predictions back.

One class, :class:`ClassifyClient`, serves both of Triton's protocols; the protocol
differences live in two small adapters over ``tritonclient.grpc`` and ``tritonclient.http``.
Images travel as they are on disk (JPEG, PNG, ...) in a BYTES tensor of shape ``[n, 1]``
with ``binary_data`` on, the way NVIDIA's ``ensemble_image_client.py`` sends them.
"""

from __future__ import annotations

import importlib
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np
from tritonclient.utils import InferenceServerException

from .errors import ClientError, InferenceFailed, ServerUnavailable

INPUT = "IMAGE"
OUTPUTS = ("SCORES", "CLASS_IDS", "LABELS")


@dataclass(frozen=True)
class Prediction:
    """One class of one image: ImageNet index, name and softmax probability."""

    index: int
    label: str
    score: float

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"index": self.index, "label": self.label, "score": round(self.score, 6)}


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


class _Grpc:
    """gRPC adapter (tritonclient.grpc): thread-safe channel, callbacks for async calls."""

    def __init__(self, target: str, timeout_s: float, ssl: bool = False) -> None:
        import tritonclient.grpc as grpcclient

        self.m = grpcclient
        self.client = grpcclient.InferenceServerClient(target, ssl=ssl)
        self.timeout_s = timeout_s

    def outputs(self, names: Sequence[str]) -> list[Any]:
        return [self.m.InferRequestedOutput(n) for n in names]

    def infer(self, model: str, inputs: list[Any], outputs: list[Any]) -> Any:
        return self.client.infer(model, inputs, outputs=outputs, client_timeout=self.timeout_s)

    def submit(
        self, model: str, inputs: list[Any], outputs: list[Any], done: Callable[[Any, Exception | None], None]
    ) -> None:
        self.client.async_infer(model, inputs, callback=done, outputs=outputs, client_timeout=self.timeout_s)

    def live(self) -> bool:
        return self.client.is_server_live(client_timeout=min(self.timeout_s, 10))

    def metadata(self, model: str) -> dict[str, Any]:
        md = self.client.get_model_metadata(model, as_json=True, client_timeout=min(self.timeout_s, 10))
        return {"outputs": [{"name": o["name"], "shape": [int(s) for s in o["shape"]]} for o in md.get("outputs", [])]}

    def close(self) -> None:
        self.client.close()


class _Http:
    """HTTP adapter (tritonclient.http). Its gevent-based client must stay on the thread that
    made it, so concurrent calls run on a pool of worker threads with one client each."""

    def __init__(self, target: str, timeout_s: float, concurrency: int, ssl: bool = False) -> None:
        import tritonclient.http as httpclient

        self.m = httpclient
        self._kwargs = {"connection_timeout": timeout_s, "network_timeout": timeout_s, "ssl": ssl}
        self.target = target
        self.client = httpclient.InferenceServerClient(target, **self._kwargs)
        self._local = threading.local()
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="tritonprep-http")
        self._worker_clients: list[Any] = []

    def _thread_client(self) -> Any:
        client = getattr(self._local, "client", None)
        if client is None:
            client = self._local.client = self.m.InferenceServerClient(self.target, **self._kwargs)
            self._worker_clients.append(client)
        return client

    def outputs(self, names: Sequence[str]) -> list[Any]:
        return [self.m.InferRequestedOutput(n, binary_data=True) for n in names]

    def infer(self, model: str, inputs: list[Any], outputs: list[Any]) -> Any:
        return self.client.infer(model, inputs, outputs=outputs)

    def submit(
        self, model: str, inputs: list[Any], outputs: list[Any], done: Callable[[Any, Exception | None], None]
    ) -> None:
        def call() -> None:
            try:
                result = self._thread_client().infer(model, inputs, outputs=outputs)
            except (InferenceServerException, OSError) as e:  # handed to the caller's callback
                done(None, e)
            else:
                done(result, None)

        self._pool.submit(call)

    def live(self) -> bool:
        return self.client.is_server_live()

    def metadata(self, model: str) -> dict[str, Any]:
        md = self.client.get_model_metadata(model)
        return {"outputs": [{"name": o["name"], "shape": [int(s) for s in o["shape"]]} for o in md.get("outputs", [])]}

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        for client in self._worker_clients:
            client.close()
        self.client.close()


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
    ) -> None:
        self.protocol, self.target = parse_url(url, protocol)
        #: exceptions that tritonclient and the sockets under it raise for a failed call
        self.errors: tuple[type[BaseException], ...] = (InferenceServerException, OSError, ValueError, KeyError)
        self.model = model
        self.concurrency = max(1, concurrency)
        try:
            self._impl: _Grpc | _Http = (
                _Grpc(self.target, timeout_s, ssl)
                if self.protocol == "grpc"
                else _Http(self.target, timeout_s, self.concurrency, ssl)
            )
        except ImportError as e:
            raise ClientError(f"tritonclient is not installed: pip install 'tritonprep[client]' ({e})") from None
        except (ValueError, OSError) as e:
            raise ServerUnavailable(f"cannot set up a {self.protocol} client for {self.target}: {e}") from None

    # ------------------------------------------------------------------ helpers
    def _describe(self, e: BaseException) -> str:
        msg = getattr(e, "message", None)
        text = msg() if callable(msg) else str(e)
        return " ".join(str(text).split())

    def _is_connection_error(self, e: BaseException) -> bool:
        text = self._describe(e).lower()
        return isinstance(e, (ConnectionError, OSError)) or any(
            s in text
            for s in ("unavailable", "connection refused", "failed to connect", "connect failed", "name resolution")
        )

    def _wrap(self, e: BaseException) -> ClientError:
        if isinstance(e, ClientError):
            return e
        if self._is_connection_error(e):
            return ServerUnavailable(f"cannot reach Triton at {self.target} over {self.protocol}: {self._describe(e)}")
        return InferenceFailed(self._describe(e))

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

    def max_top_k(self) -> int:
        """How many predictions per image the server returns (the ``SCORES`` dims)."""
        try:
            outputs = {o["name"]: o["shape"] for o in self._impl.metadata(self.model)["outputs"]}
        except self.errors as e:
            raise self._wrap(e) from None
        if "SCORES" not in outputs:
            raise ClientError(f"model {self.model!r} has no SCORES output; is it the tritonprep classify ensemble?")
        return int(outputs["SCORES"][-1])

    def classify(self, images: Sequence[bytes], top_k: int | None = None) -> list[list[Prediction]]:
        """Classify ``images`` in one request; the whole request fails if one image is bad."""
        if not images:
            return []
        try:
            result = self._impl.infer(self.model, [image_input(images, self._impl.m)], self._impl.outputs(OUTPUTS))
        except self.errors as e:
            raise self._wrap(e) from None
        return self._predictions(result, len(images), top_k)

    def classify_each(
        self, images: Sequence[bytes], top_k: int | None = None
    ) -> Iterator[tuple[int, list[Prediction] | ClientError]]:
        """Classify each image in its own request, ``concurrency`` in flight.

        Yields ``(index, result)`` in completion order; ``result`` is the image's
        predictions or its :class:`ClientError`. One bad image fails only itself.
        """
        finished: queue.Queue[tuple[int, list[Prediction] | ClientError]] = queue.Queue()
        slots = threading.Semaphore(self.concurrency)

        def submit_all() -> None:
            for i, data in enumerate(images):
                slots.acquire()

                def done(result: Any, error: BaseException | None, i: int = i) -> None:
                    try:
                        finished.put(
                            (i, self._wrap(error) if error is not None else self._predictions(result, 1, top_k)[0])
                        )
                    except self.errors as e:  # a malformed result becomes this image's error
                        finished.put((i, self._wrap(e)))
                    finally:
                        slots.release()

                try:
                    self._impl.submit(
                        self.model, [image_input([data], self._impl.m)], self._impl.outputs(OUTPUTS), done
                    )
                except self.errors as e:
                    done(None, e)

        threading.Thread(target=submit_all, name="tritonprep-submit", daemon=True).start()
        for _ in range(len(images)):
            yield finished.get()

    def preprocess(self, images: Sequence[bytes], model: str = "preprocess", output: str = "PIXELS") -> np.ndarray:
        """Call the preprocess model directly and return the network input it produces."""
        try:
            result = self._impl.infer(model, [image_input(images, self._impl.m)], self._impl.outputs([output]))
        except self.errors as e:
            raise self._wrap(e) from None
        return result.as_numpy(output)

    def close(self) -> None:
        """Close the connection(s)."""
        self._impl.close()

    def __enter__(self) -> ClassifyClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
