"""A throw-away PKI for the control plane: CA, apiserver serving cert, admin client cert and
service-account signing keys (``cryptography``, a dev extra)."""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ordo_devcluster.errors import ControlPlaneError

try:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ControlPlaneError(
        "the `cryptography` package is needed to generate the control plane's "
        "certificates: pip install cryptography"
    ) from exc

__all__ = ["SERVICE_CLUSTER_IP_RANGE", "Pki", "generate_pki", "issue_client_cert"]

SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"


@dataclass(frozen=True)
class Pki:
    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    admin_cert: Path
    admin_key: Path
    sa_public_key: Path
    sa_private_key: Path


def _key_usage(*, ca: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )


def _key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _write(directory: Path, name: str, data: bytes) -> Path:
    path = directory / name
    path.write_bytes(data)
    path.chmod(0o600)
    return path


def _leaf(
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    subject: x509.Name,
    usage: x509.ObjectIdentifier,
    sans: Sequence[x509.GeneralName],
) -> tuple[bytes, bytes]:
    now = dt.datetime.now(dt.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(ca=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski),
            critical=False,
        )
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def issue_client_cert(
    pki: Pki, name: str, *, common_name: str, organizations: Sequence[str] = ()
) -> tuple[Path, Path]:
    """A client certificate signed by the throw-away CA, written next to it as
    ``<name>.crt``/``<name>.key``; returns both paths. Kubernetes reads the user from the CN and
    the groups from the O attributes (``system:nodes``, ``system:masters``, ...)."""
    ca_cert = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
    ca_key = serialization.load_pem_private_key(pki.ca_key.read_bytes(), password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):  # pragma: no cover - we wrote it
        raise ControlPlaneError(f"{pki.ca_key} is not the EC key this module writes")
    subject = x509.Name(
        [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
        + [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    )
    cert, key = _leaf(ca_cert, ca_key, subject, ExtendedKeyUsageOID.CLIENT_AUTH, [])
    directory = pki.ca_cert.parent
    return _write(directory, f"{name}.crt", cert), _write(directory, f"{name}.key", key)


def generate_pki(directory: Path, *, extra_ips: Sequence[str] = ()) -> Pki:
    """A throw-away CA, a serving cert for 127.0.0.1 (and ``extra_ips``), an admin client cert,
    SA signing keys."""
    directory.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ordo-devcluster-ca")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(ca=True), critical=True)
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    serving_sans: list[x509.GeneralName] = [
        x509.IPAddress(ipaddress.IPv4Address("127.0.0.1")),
        x509.IPAddress(next(ipaddress.IPv4Network(SERVICE_CLUSTER_IP_RANGE).hosts())),
        *(x509.IPAddress(ipaddress.ip_address(ip)) for ip in extra_ips),
        x509.DNSName("localhost"),
        x509.DNSName("kubernetes"),
        x509.DNSName("kubernetes.default"),
        x509.DNSName("kubernetes.default.svc"),
    ]
    serving_cert, serving_key = _leaf(
        ca_cert,
        ca_key,
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]),
        ExtendedKeyUsageOID.SERVER_AUTH,
        serving_sans,
    )
    admin_cert, admin_key = _leaf(
        ca_cert,
        ca_key,
        x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
                x509.NameAttribute(NameOID.COMMON_NAME, "admin"),
            ]
        ),
        ExtendedKeyUsageOID.CLIENT_AUTH,
        [],
    )
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return Pki(
        ca_cert=_write(directory, "ca.crt", ca_cert.public_bytes(serialization.Encoding.PEM)),
        ca_key=_write(directory, "ca.key", _key_pem(ca_key)),
        serving_cert=_write(directory, "apiserver.crt", serving_cert),
        serving_key=_write(directory, "apiserver.key", serving_key),
        admin_cert=_write(directory, "admin.crt", admin_cert),
        admin_key=_write(directory, "admin.key", admin_key),
        sa_public_key=_write(
            directory,
            "sa.pub",
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            ),
        ),
        sa_private_key=_write(directory, "sa.key", _key_pem(sa_key)),
    )
