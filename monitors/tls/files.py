"""The three `tls:` files and the checks a node runs on them before it starts.

Each problem names the key (certfile, keyfile or cafile), the path and what is wrong, so that
`rabbitry node start` can exit 2 with `tls.keyfile: ...` as it does for any config mistake.
"""

from __future__ import annotations

import datetime
import stat
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from monitors.tls.names import San, describe_san, san_names_node

KEYS = ("certfile", "keyfile", "cafile")


class TlsFileError(ValueError):
    """A `tls:` file that cannot be used: `key` is certfile, keyfile or cafile."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"tls.{key}: {problem}")
        self.key = key
        self.problem = problem


@dataclass(frozen=True)
class TlsFiles:
    """A node's certificate, its private key (mode 0600) and the CA peers must chain to."""

    certfile: Path
    keyfile: Path
    cafile: Path
    crlfile: Path | None = None  # a CRL from the CA (`rabbitry tls revoke` writes it)

    def paths(self) -> dict[str, Path]:
        paths = {"certfile": self.certfile, "keyfile": self.keyfile, "cafile": self.cafile}
        if self.crlfile is not None:
            paths["crlfile"] = self.crlfile
        return paths


def _read(key: str, path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise TlsFileError(key, f"cannot read {path}: {exc.strerror or exc}") from None


def _certificates(key: str, path: Path, data: bytes) -> list[x509.Certificate]:
    try:
        certs = x509.load_pem_x509_certificates(data)
    except ValueError as exc:
        raise TlsFileError(key, f"{path} holds no PEM certificate ({exc})") from None
    return certs


def cert_san(cert: x509.Certificate) -> San:
    """A certificate's SANs in getpeercert()'s shape (see names.py)."""
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return ()
    out: list[tuple[str, str]] = []
    for name in ext:
        if isinstance(name, x509.DNSName):
            out.append(("DNS", name.value))
        elif isinstance(name, x509.IPAddress):
            out.append(("IP Address", str(name.value)))
        elif isinstance(name, x509.UniformResourceIdentifier):
            out.append(("URI", name.value))
    return tuple(out)


def check_crl(path: Path, cas: list[x509.Certificate]) -> x509.CertificateRevocationList:
    """The CRL in `path`, which one of `cas` must have signed (a CRL from another CA would
    revoke nothing and hide the mistake)."""
    try:
        crl = x509.load_pem_x509_crl(_read("crlfile", path))
    except ValueError as exc:
        raise TlsFileError("crlfile", f"{path} holds no PEM CRL ({exc})") from None
    for ca in cas:
        if ca.subject == crl.issuer:
            try:
                if crl.is_signature_valid(ca.public_key()):  # type: ignore[arg-type]
                    return crl
            except TypeError:
                continue
    raise TlsFileError(
        "crlfile",
        f"{path} is not signed by the CA in cafile (it is from {crl.issuer.rfc4514_string()}); "
        "make it with `rabbitry tls revoke` in the CA's directory",
    )


def check_tls_files(
    files: TlsFiles, node: str | None = None, now: datetime.datetime | None = None
) -> None:
    """Raise TlsFileError unless the files are readable, the key is the certificate's and is
    readable by its owner only, the CA file holds a certificate, and the certificate is valid
    now and (given `node`) names that node."""
    for which, path in files.paths().items():
        _read(which, path)
    info = files.keyfile.stat()
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise TlsFileError(
            "keyfile",
            f"{files.keyfile} has mode {stat.S_IMODE(info.st_mode):04o}; whoever reads the key "
            f"can pose as this node: run `chmod 600 {files.keyfile}`",
        )
    cert = _certificates("certfile", files.certfile, _read("certfile", files.certfile))[0]
    cas = _certificates("cafile", files.cafile, _read("cafile", files.cafile))
    if files.crlfile is not None:
        check_crl(files.crlfile, cas)
    try:
        key = serialization.load_pem_private_key(_read("keyfile", files.keyfile), password=None)
    except TypeError:
        raise TlsFileError(
            "keyfile", f"{files.keyfile} is encrypted; a node needs an unencrypted key (mode 0600)"
        ) from None
    except ValueError as exc:
        raise TlsFileError("keyfile", f"{files.keyfile} holds no PEM private key ({exc})") from None
    fmt = serialization.PublicFormat.SubjectPublicKeyInfo
    enc = serialization.Encoding.DER
    if key.public_key().public_bytes(enc, fmt) != cert.public_key().public_bytes(enc, fmt):
        raise TlsFileError(
            "keyfile", f"{files.keyfile} is not the private key of the certificate {files.certfile}"
        )
    now = now or datetime.datetime.now(datetime.UTC)
    if not cert.not_valid_before_utc <= now <= cert.not_valid_after_utc:
        raise TlsFileError(
            "certfile",
            f"{files.certfile} is valid from {cert.not_valid_before_utc:%Y-%m-%d %H:%M} to "
            f"{cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC, not now",
        )
    if node is not None and not san_names_node(cert_san(cert), node):
        raise TlsFileError(
            "certfile",
            f"{files.certfile} does not name {node}: it carries {describe_san(cert_san(cert))}; "
            f"expected a URI SAN rabbitry://{node} or a DNS/IP SAN {node.partition('@')[2]} "
            "(`rabbitry tls gen` makes such certificates)",
        )
