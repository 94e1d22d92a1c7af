"""tritonprep client: classify and embed images with a Triton server running the tritonprep ensembles.

* :mod:`tritonprep_client.client` - :class:`ClassifyClient` (gRPC and HTTP), :class:`ImageResult`, :class:`Provenance`
* :mod:`tritonprep_client.cli` - the ``tritonprep`` command line
* :mod:`tritonprep_client.errors` - client exceptions
"""

from .client import ClassifyClient, ImageResult, Prediction, Provenance, image_input, images_array
from .errors import ClientError, InferenceFailed, ServerUnavailable

__all__ = [
    "ClassifyClient",
    "ClientError",
    "ImageResult",
    "InferenceFailed",
    "Prediction",
    "Provenance",
    "ServerUnavailable",
    "image_input",
    "images_array",
]
