"""A throwaway CA, a server certificate for localhost/127.0.0.1 and a client certificate, as PEM files."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Certs:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path
    """A CA that signed nothing here: trusting it must fail the handshake."""


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _ca(cn: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    now = dt.datetime.now(dt.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn)).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    return cert, key


def _leaf(cn: str, ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey, usage: x509.ObjectIdentifier,
          sans: list[x509.GeneralName]) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    now = dt.datetime.now(dt.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(ca.subject).public_key(key.public_key())
               .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
               .not_valid_after(now + dt.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def _write_cert(path: Path, cert: x509.Certificate) -> Path:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> Path:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    return path


def make_certs(directory: Path) -> Certs:
    """Writes the CA and both leaf certificates (and an unrelated CA) under `directory`."""
    ca, ca_key = _ca("macaron-test-ca")
    other, _ = _ca("someone-else-ca")
    sans = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    server, server_key = _leaf("localhost", ca, ca_key, ExtendedKeyUsageOID.SERVER_AUTH, sans)
    client, client_key = _leaf("macaron-router", ca, ca_key, ExtendedKeyUsageOID.CLIENT_AUTH, [])
    return Certs(
        ca=_write_cert(directory / "ca.crt", ca),
        server_cert=_write_cert(directory / "tls.crt", server),
        server_key=_write_key(directory / "tls.key", server_key),
        client_cert=_write_cert(directory / "client.crt", client),
        client_key=_write_key(directory / "client.key", client_key),
        other_ca=_write_cert(directory / "other-ca.crt", other),
    )
