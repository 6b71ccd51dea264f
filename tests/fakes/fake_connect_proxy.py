"""A loopback HTTPS CONNECT proxy that ends TLS itself and hands the plain HTTP to a local
server: how a real CLI whose OAuth token URL is fixed (claude: ``platform.claude.com``,
gemini: ``oauth2.googleapis.com``) reaches tests/fakes/fake_token_api.py offline.

The CLI gets ``HTTPS_PROXY=http://127.0.0.1:PORT`` and ``NODE_EXTRA_CA_CERTS`` naming the
test CA (``ca_pem``), which signed a certificate for every host in ``hosts``. A CONNECT to
any other host is refused (403), so nothing leaves the machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ssl
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def make_certs(hosts: list[str], folder: Path) -> tuple[Path, Path, Path]:
    """A test CA and a leaf certificate for ``hosts``: (ca.pem, leaf.pem, leaf.key)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("cli-proxy test CA"))
        .issuer_name(_name("cli-proxy test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(_name(hosts[0]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(h) for h in hosts]), False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    ca_pem, leaf_pem, leaf_key = folder / "ca.pem", folder / "leaf.pem", folder / "leaf.key"
    ca_pem.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    leaf_pem.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    leaf_key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return ca_pem, leaf_pem, leaf_key


@dataclass
class ConnectProxy:
    """CONNECT to one of ``hosts`` -> TLS ended here -> plain HTTP to ``upstream`` (port)."""

    hosts: list[str]
    upstream: int
    connects: list[str] = field(default_factory=list)  # "host:port" of every CONNECT
    refused: list[str] = field(default_factory=list)
    url: str = ""
    ca_pem: Path | None = None
    _server: asyncio.Server | None = None
    _dir: tempfile.TemporaryDirectory[str] | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def start(self) -> ConnectProxy:
        self._dir = tempfile.TemporaryDirectory(prefix="cli-proxy-test-ca-")
        self.ca_pem, leaf, key = make_certs(self.hosts, Path(self._dir.name))
        self._tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._tls.load_cert_chain(leaf, key)
        self._server = await asyncio.start_server(self._client, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            method, target, _ = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
            host = target.rsplit(":", 1)[0]
            if method != "CONNECT" or host not in self.hosts:
                self.refused.append(f"{method} {target}")
                writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
                await writer.drain()
                return
            self.connects.append(target)
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
            await writer.start_tls(self._tls)
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream)
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        except (OSError, ValueError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        finally:
            writer.close()
            if task is not None:
                self._tasks.discard(task)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._tasks):
                task.cancel()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
        if self._dir is not None:
            self._dir.cleanup()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
    except (OSError, ssl.SSLError):
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            writer.write_eof()
