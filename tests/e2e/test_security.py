"""Secure defaults of the embedded launcher: restricted admin APIs (HTTP and gRPC) and gRPC over TLS."""

from __future__ import annotations

import shutil
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from tritonprep.errors import ServerError
from tritonprep.launcher.options import ADMIN_HEADER, GRPC_HEADER_PREFIX, RESTRICTED_APIS, ServerOptions
from tritonprep.launcher.process import EmbeddedServer
from tritonprep_testkit.servers import MODEL_REPOSITORY, free_ports

pytestmark = pytest.mark.e2e

KEY = "test-admin-key-4711"
#: one call of each restricted HTTP API: (method, path)
RESTRICTED_CALLS = {
    "statistics": ("GET", "/v2/models/preprocess/stats"),
    "model-config": ("GET", "/v2/models/preprocess/config"),
    "model-repository": ("POST", "/v2/repository/index"),
    "shared-memory": ("GET", "/v2/systemsharedmemory/status"),
    "trace": ("GET", "/v2/trace/setting"),
    "logging": ("GET", "/v2/logging"),
}


def http(server: EmbeddedServer, method: str, path: str, headers: dict[str, str] | None = None) -> int:
    request = urllib.request.Request(
        server.options.http_url + path, method=method, headers=headers or {}, data=b"{}" if method == "POST" else None
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed (needed to make a test certificate)")
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


@pytest.fixture(scope="module")
def secure_server(tmp_path_factory: pytest.TempPathFactory, tls_files: tuple[Path, Path]):
    http_port, grpc_port, metrics_port = free_ports(3)
    cert, key = tls_files
    options = ServerOptions(
        MODEL_REPOSITORY,
        http_port=http_port,
        grpc_port=grpc_port,
        metrics_port=metrics_port,
        admin_key=KEY,
        grpc_tls_cert=cert,
        grpc_tls_key=key,
    )
    with EmbeddedServer(options, tmp_path_factory.mktemp("secure") / "tritonserver.log") as server:
        yield server


@pytest.mark.parametrize("api", sorted(RESTRICTED_CALLS))
def test_restricted_http_apis_need_the_admin_header(secure_server, api):
    method, path = RESTRICTED_CALLS[api]
    assert http(secure_server, method, path) == 403
    assert http(secure_server, method, path, {ADMIN_HEADER: "wrong"}) == 403
    assert http(secure_server, method, path, {ADMIN_HEADER: KEY}) == 200


def test_health_metadata_and_inference_stay_open(secure_server, jpegs):
    assert http(secure_server, "GET", "/v2/health/ready") == 200
    assert http(secure_server, "GET", "/v2/models/classify") == 200
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(f"127.0.0.1:{secure_server.options.http_port}")
    arr = np.array([[jpegs["chelsea"]]], dtype=np.object_)
    inp = httpclient.InferInput("IMAGE", [1, 1], "BYTES")
    inp.set_data_from_numpy(arr, binary_data=True)
    assert client.infer("classify", [inp]).as_numpy("CLASS_IDS").shape == (1, 5)
    client.close()


def grpc_client(server: EmbeddedServer, cert: Path | None):
    import tritonclient.grpc as grpcclient

    return grpcclient.InferenceServerClient(
        server.options.grpc_url, ssl=cert is not None, root_certificates=str(cert) if cert else None
    )


def test_grpc_is_tls_only_and_restricts_the_same_apis(secure_server, tls_files, jpegs):
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    cert, _ = tls_files
    plain = grpc_client(secure_server, None)
    with pytest.raises(InferenceServerException):
        plain.is_server_live(client_timeout=5)
    plain.close()
    client = grpc_client(secure_server, cert)
    assert client.is_server_live(client_timeout=10)
    assert client.get_model_metadata("classify", client_timeout=10).name == "classify"
    for call in (
        lambda h: client.get_model_config("preprocess", headers=h, client_timeout=10),
        lambda h: client.get_inference_statistics("preprocess", headers=h, client_timeout=10),
        lambda h: client.get_model_repository_index(headers=h, client_timeout=10),
        lambda h: client.get_log_settings(headers=h, client_timeout=10),
    ):
        for headers in (None, {ADMIN_HEADER: KEY}, {GRPC_HEADER_PREFIX + ADMIN_HEADER: "wrong"}):
            with pytest.raises(InferenceServerException) as e:
                call(headers)
            # Triton 2.51 answers UNAVAILABLE "This protocol is restricted, expecting header ..."
            assert "protocol is restricted" in str(e.value), e.value
        assert call(secure_server.grpc_admin_headers) is not None
    inp = grpcclient.InferInput("IMAGE", [1, 1], "BYTES")
    inp.set_data_from_numpy(np.array([[jpegs["coffee"]]], dtype=np.object_))
    assert client.infer("classify", [inp], client_timeout=30).as_numpy("CLASS_IDS")[0, 0] == 967
    client.close()


def test_default_server_restricts_with_a_random_key(server):
    """The shared test server uses the defaults: the admin APIs are closed to anyone without its key."""
    assert server.options.restricted_apis == RESTRICTED_APIS and server.options.admin_key is None
    assert len(server.admin_key) >= 24
    assert http(server, "GET", "/v2/models/preprocess/stats") == 403
    assert http(server, "GET", "/v2/models/preprocess/stats", server.admin_headers) == 200
    assert f"--http-restricted-api={','.join(RESTRICTED_APIS)}:{ADMIN_HEADER}=" in " ".join(
        server.servers[0].command(Path("x"))
    )


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        ({"grpc_tls_cert": Path("c.pem")}, "both a certificate and a key"),
        ({"grpc_tls_root_cert": Path("ca.pem")}, "needs --grpc-tls-cert"),
        ({"admin_key": "a:b"}, "admin_key"),
        ({"admin_key": ""}, "admin_key"),
        ({"restricted_apis": ("everything",)}, "unknown API"),
    ],
)
def test_invalid_security_options_are_refused(kw, needle):
    with pytest.raises(ServerError, match=needle):
        ServerOptions(**kw)


def test_unrestricted_opt_out_and_tls_flags_on_the_command_line(tls_files):
    cert, key = tls_files
    cmd = " ".join(
        EmbeddedServer(
            ServerOptions(restricted_apis=(), grpc_tls_cert=cert, grpc_tls_key=key, grpc_tls_root_cert=cert)
        ).command(Path("b"))
    )
    assert "restricted" not in cmd
    assert f"--grpc-server-cert {cert}" in cmd and "--grpc-use-ssl-mutual true" in cmd and "--host" not in cmd
    assert "--http-address 127.0.0.1" in cmd and "--model-control-mode none" in cmd
