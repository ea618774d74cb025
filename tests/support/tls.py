"""TLS material for the front door tests, made in the test (the ``cryptography`` package):
a CA, a server certificate for 127.0.0.1 and localhost, client certificates. Never committed.

    pki = Pki.make(tmp_path)            # ca.pem, server.pem/server.key
    pki.client("sender", sans=["sender.example"])   # client-sender.pem/.key, signed by the CA
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

Key = ec.EllipticCurvePrivateKey


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _san(value: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(value))
    except ValueError:
        pass
    if "://" in value:
        return x509.UniformResourceIdentifier(value)
    if "@" in value:
        return x509.RFC822Name(value)
    return x509.DNSName(value)


def certificate(
    *, subject: str, key: Key, issuer: str, issuer_key: Key, ca: bool, sans: list[str]
) -> x509.Certificate:
    """A certificate valid from 5 minutes ago for a day."""
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if sans:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([_san(s) for s in sans]), critical=False
        )
    return builder.sign(issuer_key, hashes.SHA256())


def _write(path: Path, cert: x509.Certificate, key: Key) -> None:
    path.with_suffix(".pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    path.with_suffix(".key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


@dataclass
class Pki:
    """A CA (``ca.pem``) in ``directory`` and its server certificate (``server.pem``,
    ``server.key``: SANs 127.0.0.1 and localhost)."""

    directory: Path
    name: str
    key: Key

    @classmethod
    def make(cls, directory: Path, *, name: str = "test-ca") -> Pki:
        directory.mkdir(parents=True, exist_ok=True)
        key = ec.generate_private_key(ec.SECP256R1())
        ca = certificate(subject=name, key=key, issuer=name, issuer_key=key, ca=True, sans=[])
        _write(directory / f"{name}", ca, key)
        pki = cls(directory, name, key)
        pki.issue("server", sans=["127.0.0.1", "localhost"])
        return pki

    @property
    def ca_file(self) -> Path:
        return self.directory / f"{self.name}.pem"

    def issue(self, name: str, *, sans: list[str]) -> tuple[Path, Path]:
        """A certificate signed by this CA as ``<name>.pem`` and ``<name>.key`` (rewritten
        if they exist); returns their paths."""
        key = ec.generate_private_key(ec.SECP256R1())
        cert = certificate(
            subject=name, key=key, issuer=self.name, issuer_key=self.key, ca=False, sans=sans
        )
        _write(self.directory / name, cert, key)
        return self.directory / f"{name}.pem", self.directory / f"{name}.key"

    def serial(self, name: str) -> int:
        """The serial number of ``<name>.pem``."""
        pem = (self.directory / f"{name}.pem").read_bytes()
        return int(x509.load_pem_x509_certificate(pem).serial_number)
