"""tritonprep client: classify and embed images with a Triton server running the tritonprep ensembles.

* :mod:`tritonprep_client.client` - :class:`ClassifyClient` (gRPC and HTTP), :class:`ImageResult`, :class:`Provenance`
* :mod:`tritonprep_client.connections` - the gRPC and HTTP adapters: several connections, renewed when their
  server goes
* :mod:`tritonprep_client.retry` - what is sent again, the backoff and its caps (:class:`RetryPolicy`), the counts
* :mod:`tritonprep_client.cli` - the ``tritonprep`` command line
* :mod:`tritonprep_client.errors` - client exceptions
"""

from .client import ClassifyClient, ImageResult, Prediction, Provenance, image_input, images_array
from .errors import ClientError, InferenceFailed, ServerUnavailable, WrongProtocol
from .retry import RetryCounts, RetryPolicy

__all__ = [
    "ClassifyClient",
    "ClientError",
    "ImageResult",
    "InferenceFailed",
    "Prediction",
    "Provenance",
    "RetryCounts",
    "RetryPolicy",
    "ServerUnavailable",
    "WrongProtocol",
    "image_input",
    "images_array",
]
