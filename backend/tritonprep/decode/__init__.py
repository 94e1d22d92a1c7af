"""Image decoding and the checks before it; owns every byte a client sends until it is pixels.

* :mod:`.checks` - signature, allowed formats and limits from the header (:func:`validate`)
* :mod:`.jpeg` - the JPEG marker walker; :mod:`.headers` - picture sizes of the other formats
* :mod:`.pillow` - Pillow on the CPU: the reference decoder and the GPU path's fallback
* :mod:`.nvimgcodec` - nvImageCodec on the GPU (imported only by the GPU executor)
* :mod:`.split` - which decoder takes an image of a call, by a hash of its bytes (the decoders' shares)

Every decoder returns upright (EXIF orientation applied) 8-bit RGB pixels and raises an
:class:`~tritonprep.errors.ImageError` subclass for an image it cannot or must not decode.
"""

from __future__ import annotations

from .checks import ImageHeader, check_dimensions, check_encoded, sniff_format, validate

__all__ = ["ImageHeader", "check_dimensions", "check_encoded", "sniff_format", "validate"]
