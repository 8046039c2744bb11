"""`rabbitry tls gen`: a CA and one certificate per node, as RabbitMQ's tls-gen makes them.

Each node certificate names its node twice: a URI SAN `rabbitry://name@host` (so that it is
accepted for that node only, docs/tls.md) and a DNS or IP SAN `host` (so that HTTPS
clients, which match host names, accept it for the control API and metrics). Keys are EC
P-256: small, and a handshake costs a fraction of an RSA one. Private keys are written with
mode 0600 before any byte of them is. Tests use the same functions to make bad certificates
(another CA, expired, another node's name).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from monitors.tls import URI_SCHEME

__all__ = [
    "CA",
    "NodeFiles",
    "generate",
    "make_ca",
    "make_cert",
    "revoke",
    "stem_for",
    "write_key",
]

DEFAULT_DAYS = 825  # the longest validity browsers accept for a server certificate
CA_FILE, CA_KEY_FILE = "ca.pem", "ca-key.pem"


@dataclass(frozen=True)
class CA:
    """A certificate authority: its key and certificate."""

    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate


@dataclass(frozen=True)
class NodeFiles:
    """Where `generate` wrote one node's files."""

    node: str
    certfile: Path
    keyfile: Path
    cafile: Path

    def tls_lines(self, relative_to: Path | None = None) -> str:
        """The `tls:` section to paste into the node's config."""

        def show(path: Path) -> str:
            if relative_to is not None:
                try:
                    return "./" + os.path.relpath(path, relative_to)
                except ValueError:
                    pass
            return str(path)

        return (
            f"tls:\n  certfile: {show(self.certfile)}\n  keyfile: {show(self.keyfile)}\n"
            f"  cafile: {show(self.cafile)}\n"
        )


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def make_ca(name: str = "rabbitry CA", days: int = DEFAULT_DAYS) -> CA:
    """A fresh self-signed CA."""
    key = _new_key()
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
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
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return CA(key, cert)


def _host_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        return x509.DNSName(host)


def make_cert(
    ca: CA,
    node: str,
    *,
    days: int = DEFAULT_DAYS,
    not_before: datetime.datetime | None = None,
    not_after: datetime.datetime | None = None,
    uri: bool = True,
    host: bool = True,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A key and a certificate for `node` (name@host) signed by `ca`: with a URI SAN
    rabbitry://node (`uri`) and a DNS/IP SAN for its host (`host`)."""
    key = _new_key()
    now = _now()
    names: list[x509.GeneralName] = []
    if uri:
        names.append(x509.UniformResourceIdentifier(URI_SCHEME + node))
    if host:
        names.append(_host_name(node.partition("@")[2]))
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, node)]))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before or now - datetime.timedelta(minutes=5))
        .not_valid_after(not_after or now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False
        )
    )
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return key, builder.sign(ca.key, hashes.SHA256())


def write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    """Write a private key (PEM, unencrypted) to a file created with mode 0600."""
    data = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, data)
    finally:
        os.close(fd)


def write_cert(path: Path, *certs: x509.Certificate) -> None:
    """Write certificates (PEM) to a file; several make a bundle (a CA file trusting both)."""
    path.write_bytes(b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs))


def load_ca(directory: Path) -> CA | None:
    """The CA in `directory` (ca.pem and ca-key.pem), or None if there is none."""
    cert_path, key_path = directory / CA_FILE, directory / CA_KEY_FILE
    if not cert_path.exists() or not key_path.exists():
        return None
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{key_path}: expected an EC private key made by `rabbitry tls gen`")
    return CA(key, cert)


def stem_for(node: str, nodes: list[str]) -> str:
    """The file name stem for `node`: its short name, unless two nodes share it."""
    short = node.partition("@")[0]
    clash = sum(1 for n in nodes if n.partition("@")[0] == short) > 1
    return node if clash else short


def generate(
    out: Path, nodes: list[str], days: int = DEFAULT_DAYS, hosts: list[str] | None = None
) -> tuple[bool, list[NodeFiles]]:
    """Make (or reuse) the CA in `out` and a certificate per node, plus one host certificate
    (DNS/IP SAN only: it names every node of that host, for nodes named at run time such as
    Spark executors) per entry of `hosts`. Returns (CA made new, the files written)."""
    out.mkdir(parents=True, exist_ok=True)
    ca = load_ca(out)
    made = ca is None
    if ca is None:
        ca = make_ca(days=days)
        write_key(out / CA_KEY_FILE, ca.key)
        write_cert(out / CA_FILE, ca.cert)
    written = []
    for node in nodes:
        stem = stem_for(node, nodes)
        key, cert = make_cert(ca, node, days=days)
        keyfile, certfile = out / f"{stem}-key.pem", out / f"{stem}.pem"
        write_key(keyfile, key)
        write_cert(certfile, cert)
        written.append(NodeFiles(node, certfile, keyfile, out / CA_FILE))
    for host in hosts or []:
        key, cert = make_cert(ca, f"any@{host}", days=days, uri=False)
        keyfile, certfile = out / f"host-{host}-key.pem", out / f"host-{host}.pem"
        write_key(keyfile, key)
        write_cert(certfile, cert)
        written.append(NodeFiles(f"*@{host}", certfile, keyfile, out / CA_FILE))
    return made, written


CRL_FILE = "crl.pem"
CRL_DAYS = 30  # nextUpdate: a CRL is re-signed (re-run `tls revoke`) at least this often


def revoke(out: Path, certfiles: list[Path], days: int = CRL_DAYS) -> tuple[Path, list[int]]:
    """Add the certificates in `certfiles` to the CRL of the CA in `out` (out/crl.pem, made
    if missing), signed by that CA. Returns the CRL's path and every revoked serial. Raises
    ValueError if `out` has no CA or a certificate is not the CA's."""
    ca = load_ca(out)
    if ca is None:
        raise ValueError(f"no CA in {out} (ca.pem and ca-key.pem): revoke where `tls gen` ran")
    path = out / CRL_FILE
    revoked: dict[int, x509.RevokedCertificate] = {}
    if path.exists():
        for entry in x509.load_pem_x509_crl(path.read_bytes()):
            revoked[entry.serial_number] = entry
    now = _now()
    for certfile in certfiles:
        cert = x509.load_pem_x509_certificate(Path(certfile).read_bytes())
        if cert.issuer != ca.cert.subject:
            raise ValueError(f"{certfile} was not issued by the CA in {out}")
        if cert.serial_number not in revoked:
            revoked[cert.serial_number] = (
                x509.RevokedCertificateBuilder()
                .serial_number(cert.serial_number)
                .revocation_date(now)
                .build()
            )
    builder = (
        x509.CertificateRevocationListBuilder()
        .issuer_name(ca.cert.subject)
        .last_update(now - datetime.timedelta(minutes=5))
        .next_update(now + datetime.timedelta(days=days))
    )
    for entry in revoked.values():
        builder = builder.add_revoked_certificate(entry)
    crl = builder.sign(ca.key, hashes.SHA256())
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(crl.public_bytes(serialization.Encoding.PEM))
    os.replace(tmp, path)  # a node reading it mid-write sees the old or the new one, whole
    return path, sorted(revoked)
