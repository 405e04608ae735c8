"""HTTPS: self-signed and given pairs, TLS >= 1.2 with AEAD suites, live certificate reloads."""

from __future__ import annotations

import shutil
import socket
import ssl
import time
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.support.fixtures import server_fixture
from tests.support.server import SimServer, run_cli
from vllm_sim.server.tls import SELF_SIGNED_ORGANIZATION, write_self_signed_pair

RELOAD_WAIT = 5.0  # generous: the server reloads within about half a second


def served_certificate(port: int, **context_options: object) -> x509.Certificate:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    for name, value in context_options.items():
        setattr(context, name, value)
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two distinct pairs, each in its own folder."""
    first, second = tmp_path_factory.mktemp("first"), tmp_path_factory.mktemp("second")
    write_self_signed_pair(first)
    write_self_signed_pair(second)
    return first, second


self_signed = server_fixture(["--self-signed-certs"], https=True)


def test_self_signed_serves_https_with_verification_off(self_signed: SimServer) -> None:
    response = httpx.post(
        self_signed.url + "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
        verify=False,
    )
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["role"] == "assistant"


def test_self_signed_certificate_shape(self_signed: SimServer) -> None:
    cert = served_certificate(self_signed.port)
    organization = cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
    assert [a.value for a in organization] == [SELF_SIGNED_ORGANIZATION]
    assert not cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    with pytest.raises(x509.ExtensionNotFound):
        cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in usage
    assert cert.public_key().key_size == 4096  # type: ignore[union-attr]
    lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc
    assert lifetime.days >= 3649


def test_verifying_client_refuses_self_signed(self_signed: SimServer) -> None:
    with pytest.raises(httpx.ConnectError):
        httpx.get(self_signed.url + "/health")


def test_plain_http_is_not_served_on_the_tls_port(self_signed: SimServer) -> None:
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{self_signed.port}/health", timeout=3)


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1_1 is deprecated")
def test_tls_below_1_2_is_refused(self_signed: SimServer) -> None:
    with pytest.raises((ssl.SSLError, OSError)):
        served_certificate(self_signed.port, maximum_version=ssl.TLSVersion.TLSv1_1)


def test_tls_1_2_without_forward_secrecy_is_refused(self_signed: SimServer) -> None:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers("AES128-GCM-SHA256")  # RSA key exchange
    with (
        socket.create_connection(("127.0.0.1", self_signed.port), timeout=5) as raw,
        pytest.raises(ssl.SSLError),
    ):
        context.wrap_socket(raw)


def test_tls_1_2_with_ecdhe_aead_is_served(self_signed: SimServer) -> None:
    tls12 = ssl.TLSVersion.TLSv1_2
    cert = served_certificate(self_signed.port, maximum_version=tls12, minimum_version=tls12)
    assert cert.subject


def pair_args(folder: Path) -> list[str]:
    return ["--ssl-certfile", str(folder / "cert.pem"), "--ssl-keyfile", str(folder / "key.pem")]


def wait_for_certificate(port: int, expected: x509.Certificate) -> bool:
    deadline = time.monotonic() + RELOAD_WAIT
    while time.monotonic() < deadline:
        if served_certificate(port) == expected:
            return True
        time.sleep(0.1)
    return False


def test_given_pair_is_served_and_reloaded_when_replaced(
    tmp_path: Path, pairs: tuple[Path, Path]
) -> None:
    first, second = pairs
    for name in ("cert.pem", "key.pem"):
        shutil.copy(first / name, tmp_path / name)
    args = pair_args(tmp_path)
    expected_first = x509.load_pem_x509_certificate((first / "cert.pem").read_bytes())
    expected_second = x509.load_pem_x509_certificate((second / "cert.pem").read_bytes())
    with SimServer(args, https=True) as server:
        assert served_certificate(server.port) == expected_first
        for name in ("cert.pem", "key.pem"):
            shutil.copy(second / name, tmp_path / name)
        assert wait_for_certificate(server.port, expected_second)
        # A broken pair on disk leaves the last good one in service.
        (tmp_path / "cert.pem").write_text("not a certificate")
        time.sleep(1.0)
        assert served_certificate(server.port) == expected_second
        assert httpx.get(server.url + "/health", verify=False).status_code == 200


def test_unloadable_pair_fails_startup_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "cert.pem").write_text("nope")
    (tmp_path / "key.pem").write_text("nope")
    args = pair_args(tmp_path)
    result = run_cli(["--model", "m", *args])
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "ssl-certfile" in lines[0], result.stderr


def test_missing_key_file_fails_startup(tmp_path: Path, pairs: tuple[Path, Path]) -> None:
    args = ["--ssl-certfile", str(pairs[0] / "cert.pem"), "--ssl-keyfile", str(tmp_path / "none")]
    result = run_cli(["--model", "m", *args])
    assert result.returncode != 0
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_a_huge_chain_written_over_the_cert_keeps_the_old_pair_serving(
    tmp_path: Path, pairs: tuple[Path, Path]
) -> None:
    """A 10 MB chain (the cert repeated) replaces the served cert: it is refused unread,
    HTTPS keeps serving the old pair, and the server answers meanwhile. A 200 KB one
    loads but no client would accept it in a handshake: refused too."""
    first, _ = pairs
    for name in ("cert.pem", "key.pem"):
        shutil.copy(first / name, tmp_path / name)
    expected = x509.load_pem_x509_certificate((first / "cert.pem").read_bytes())
    cert = (first / "cert.pem").read_bytes()
    with SimServer(pair_args(tmp_path), https=True) as server:
        for size in (10 << 20, 200 << 10):
            (tmp_path / "cert.pem").write_bytes(cert * (size // len(cert) + 1))
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline:
                health = httpx.get(server.url + "/health", verify=False, timeout=5)
                assert health.status_code == 200
                time.sleep(0.1)
            assert served_certificate(server.port) == expected
            assert "TLS pair reload failed" in server.stderr()
