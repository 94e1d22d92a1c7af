"""tritonprep client: classify images with a Triton server running the tritonprep ensemble.

* :mod:`tritonprep_client.client` - :class:`ClassifyClient` (gRPC and HTTP)
* :mod:`tritonprep_client.cli` - the ``tritonprep`` command line
* :mod:`tritonprep_client.errors` - client exceptions
"""

from .client import ClassifyClient, Prediction, image_input, images_array
from .errors import ClientError, InferenceFailed, ServerUnavailable

__all__ = [
    "ClassifyClient",
    "ClientError",
    "InferenceFailed",
    "Prediction",
    "ServerUnavailable",
    "image_input",
    "images_array",
]
