"""The embedder's vectors leave at unit length in the config's dtype, whatever precision the network ran in."""

from __future__ import annotations

import numpy as np
import pytest

from tritonprep.classifier.embedding import as_embeddings, embedding_dtype
from tritonprep.errors import ConfigError


def test_vectors_normalised_in_half_precision_leave_at_unit_length():
    rng = np.random.default_rng(0)
    v = rng.random((4, 1280), dtype=np.float32)
    half = (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float16)  # what the FP16 network gives
    assert np.abs(np.linalg.norm(half.astype(np.float32), axis=1) - 1).max() > 1e-5
    out = as_embeddings(half.astype(np.float32), np.dtype(np.float32))
    assert out.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-6)
    assert as_embeddings(np.zeros((1, 1280), np.float32), np.dtype(np.float16)).dtype == np.float16


def test_the_config_decides_the_dtype_and_any_width_is_one_axis():
    config = {"output": [{"name": "embedding", "dims": [1280], "data_type": "TYPE_FP16"}]}
    assert embedding_dtype(config) == np.float16
    assert embedding_dtype({"output": [{"name": "embedding", "dims": [512], "data_type": "TYPE_FP32"}]}) == np.float32
    for dims in ([16, 32], [], [0]):
        with pytest.raises(ConfigError, match="one axis"):
            embedding_dtype({"output": [{"name": "embedding", "dims": dims, "data_type": "TYPE_FP16"}]})
