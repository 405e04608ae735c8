"""HTTPS: the server's TLS context, a generated self-signed pair, and live cert reloads."""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import ssl
import tempfile
from pathlib import Path

from vllm_sim.config import Config

log = logging.getLogger("vllm_sim")

# TLS 1.2 suites are limited to forward-secret AEAD ones; TLS 1.3 suites are all AEAD.
_TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"
SELF_SIGNED_ORGANIZATION = "llm-d Inference Simulator"
_SELF_SIGNED_KEY_BITS = 4096
_SELF_SIGNED_DAYS = 3650
POLL_INTERVAL = 0.25  # seconds between two looks at the cert files
DEBOUNCE = 0.25  # a change must rest this long before the pair is reloaded
# A served chain is a few kilobytes; a client refuses one much past 100 KiB (OpenSSL's
# default limit on a peer's certificate list), so a larger file is refused unread.
MAX_PAIR_FILE_BYTES = 1 << 20
_HANDSHAKE_ROUNDS = 8


def server_context(certfile: str, keyfile: str) -> ssl.SSLContext:
    """A TLS >= 1.2 server context holding the pair; raises ssl.SSLError/OSError if bad."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(_TLS12_CIPHERS)
    context.load_cert_chain(certfile, keyfile)
    return context


def write_self_signed_pair(directory: Path) -> tuple[str, str]:
    """Generates an RSA key and a 10-year server-auth certificate; returns (cert, key) paths.

    The subject carries only an organization (no CN, no SAN), so clients must turn
    verification off, as with the reference simulator.
    """
    # Imported here: only --self-signed-certs needs them, and they cost start-up time.
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = rsa.generate_private_key(public_exponent=65537, key_size=_SELF_SIGNED_KEY_BITS)
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, SELF_SIGNED_ORGANIZATION)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=_SELF_SIGNED_DAYS))
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_encipherment=True,
                content_commitment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(key, hashes.SHA256())
    )
    certfile, keyfile = directory / "cert.pem", directory / "key.pem"
    certfile.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    keyfile.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    keyfile.chmod(0o600)
    return str(certfile), str(keyfile)


def _signature(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


class TlsSetup:
    """The context the HTTP server serves with, and what keeps it current.

    A pair given on the command line is watched: when either file changes on disk, the
    pair is reloaded after a short rest, new handshakes get the new certificate, and a
    pair that fails to load leaves the old one in place.
    """

    def __init__(self, certfile: str, keyfile: str, watched: bool) -> None:
        self.certfile = certfile
        self.keyfile = keyfile
        self.context = server_context(certfile, keyfile)
        self._watched = watched
        self._task: asyncio.Task[None] | None = None
        self._temp: tempfile.TemporaryDirectory[str] | None = None

    @classmethod
    def self_signed(cls) -> TlsSetup:
        temp = tempfile.TemporaryDirectory(prefix="vllm-sim-tls-")
        certfile, keyfile = write_self_signed_pair(Path(temp.name))
        setup = cls(certfile, keyfile, watched=False)
        setup._temp = temp
        return setup

    def start_watching(self) -> None:
        if self._watched and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._watch())

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        if self._temp is not None:
            self._temp.cleanup()

    def _signatures(self) -> tuple[object, object]:
        return _signature(self.certfile), _signature(self.keyfile)

    async def _watch(self) -> None:
        seen = self._signatures()
        while True:
            await asyncio.sleep(POLL_INTERVAL)
            current = self._signatures()
            if current == seen:
                continue
            # Writers replace a cert and its key in two steps: wait until both rest.
            await asyncio.sleep(DEBOUNCE)
            seen = self._signatures()
            # Parsing a pair (and proving it in a handshake) takes a while for a large
            # one: off the event loop, so serving never waits on it.
            await asyncio.to_thread(self.reload)

    def reload(self) -> bool:
        """Loads the pair afresh; True if the new pair is now served. A pair that is too
        large, fails to load, or that a client could not complete a handshake with leaves
        the previous one in service."""
        try:
            _check_sizes(self.certfile, self.keyfile)
            trial = server_context(self.certfile, self.keyfile)
            _prove_handshake(trial)  # before the swap: the live context only ever works
            self.context.load_cert_chain(self.certfile, self.keyfile)
        except (ssl.SSLError, OSError, ValueError) as exc:
            log.warning("TLS pair reload failed, keeping the previous certificate: %s", exc)
            return False
        log.info("TLS certificate reloaded from %s", self.certfile)
        return True


def _check_sizes(*paths: str) -> None:
    for path in paths:
        size = os.stat(path).st_size
        if size > MAX_PAIR_FILE_BYTES:
            raise ValueError(
                f"{path} is {size} bytes, more than the {MAX_PAIR_FILE_BYTES} a TLS file may be"
            )


def _prove_handshake(server: ssl.SSLContext) -> None:
    """A TLS handshake in memory between `server` and a default client (no verification):
    raises ssl.SSLError if a client could not connect with it (a chain too long for a
    client to accept, a key that does not match)."""
    client_context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_context.check_hostname = False
    client_context.verify_mode = ssl.CERT_NONE
    to_server, to_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    from_server, from_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = client_context.wrap_bio(to_client, from_client)
    served = server.wrap_bio(to_server, from_server, server_side=True)
    done = {"client": False, "server": False}
    for _ in range(_HANDSHAKE_ROUNDS):
        for name, side in (("client", client), ("server", served)):
            if not done[name]:
                try:
                    side.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
        to_server.write(from_client.read())
        to_client.write(from_server.read())
        if all(done.values()):
            return
    raise ssl.SSLError("the new pair did not complete a TLS handshake")


class TlsError(Exception):
    """The configured pair cannot be served."""


def tls_setup(cfg: Config) -> TlsSetup | None:
    """HTTPS as configured: None for plain HTTP."""
    if cfg.self_signed_certs:
        return TlsSetup.self_signed()
    if not cfg.ssl_certfile:
        return None
    try:
        return TlsSetup(cfg.ssl_certfile, cfg.ssl_keyfile, watched=True)
    except (ssl.SSLError, OSError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise TlsError(f"ssl-certfile/ssl-keyfile: cannot load the pair: {reason}") from None
