"""A small CA and one certificate per lane, for Dagu's coordinator and workers (mTLS only).

Everything lives in NEV_DAGU_PKI_DIR on the development box (default
~/.local/state/nev/dagu-pki, folder mode 700, files mode 600): never in the
repository and never on the NAS. Each lane gets a certificate for its rig address
(an IP SAN) with both serverAuth and clientAuth, so the same pair serves the
coordinator and authenticates a worker.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from lanes.base import settings
from lanes.base.errors import ConfigError

VALID_DAYS = 365
RENEW_DAYS = 30


@dataclass(frozen=True)
class LaneCert:
    cert_pem: bytes
    key_pem: bytes
    ca_pem: bytes


def pki_dir() -> Path:
    return settings.path(settings.DAGU_PKI_DIR)


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(str(path) + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(str(path) + ".tmp", 0o600)
    os.replace(str(path) + ".tmp", path)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _fresh(cert: x509.Certificate) -> bool:
    return cert.not_valid_after_utc - _now() > dt.timedelta(days=RENEW_DAYS)


def ensure_ca(folder: Path) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    kp, cp = folder / "ca.key", folder / "ca.crt"
    if kp.exists() and cp.exists():
        try:
            key = serialization.load_pem_private_key(kp.read_bytes(), None)
            cert = x509.load_pem_x509_certificate(cp.read_bytes())
        except ValueError:
            raise ConfigError(f"{folder}: ca.key/ca.crt are not a PEM key and certificate; remove them "
                              "to make a new CA (then run `nev dagu up --distributed` again)") from None
        if isinstance(key, ec.EllipticCurvePrivateKey) and _fresh(cert):
            return key, cert
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "nev dagu CA")])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(_now() - dt.timedelta(minutes=5))
            .not_valid_after(_now() + dt.timedelta(days=VALID_DAYS * 5))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    _write_private(kp, _key_pem(key))
    _write_private(cp, cert.public_bytes(serialization.Encoding.PEM))
    return key, cert


def _matches(cert: x509.Certificate, addr: str, ca: x509.Certificate) -> bool:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    return (ipaddress.ip_address(addr) in san.get_values_for_type(x509.IPAddress)
            and cert.issuer == ca.subject and _fresh(cert))


def lane_cert(index: int, addr: str, folder: Path | None = None) -> LaneCert:
    """The lane's certificate and key (made or renewed when needed) and the CA certificate."""
    folder = folder or pki_dir()
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        raise ConfigError(f"lane {index} address {addr!r} is not an IP address; distributed mode needs the "
                          "lane's rig IP in its SSH address") from None
    ca_key, ca = ensure_ca(folder)
    kp, cp = folder / f"lane{index}.key", folder / f"lane{index}.crt"
    if kp.exists() and cp.exists():
        cert = x509.load_pem_x509_certificate(cp.read_bytes())
        if _matches(cert, addr, ca):
            return LaneCert(cp.read_bytes(), kp.read_bytes(), ca.public_bytes(serialization.Encoding.PEM))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"lane{index}")]))
            .issuer_name(ca.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(_now() - dt.timedelta(minutes=5))
            .not_valid_after(_now() + dt.timedelta(days=VALID_DAYS))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ip), x509.DNSName(f"lane{index}")]),
                           critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    _write_private(kp, _key_pem(key))
    _write_private(cp, cert.public_bytes(serialization.Encoding.PEM))
    return LaneCert(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key),
                    ca.public_bytes(serialization.Encoding.PEM))
