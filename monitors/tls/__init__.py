"""TLS for a node's links (docs/tls.md): the `tls:` files, the SSL contexts built from
them (rebuilt when the files change), which node a certificate names, and HTTPS for the
node's small HTTP servers.

    from monitors.tls import TlsFiles, TlsContexts, TlsFileError, check_tls_files
    from monitors.tls import san_names_node, peer_san, serve_https, https_client_context
"""

from monitors.tls.contexts import TlsContexts, https_client_context
from monitors.tls.files import TlsFileError, TlsFiles, check_tls_files
from monitors.tls.https import serve_https
from monitors.tls.names import URI_SCHEME, describe_san, peer_san, san_names_node

__all__ = [
    "URI_SCHEME",
    "TlsContexts",
    "TlsFileError",
    "TlsFiles",
    "check_tls_files",
    "describe_san",
    "https_client_context",
    "peer_san",
    "san_names_node",
    "serve_https",
]
