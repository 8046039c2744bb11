"""`rabbitry tls gen --out DIR NODE...`: a CA and a certificate per node, and the `tls:` lines
to paste into each node's config (as RabbitMQ's tls-gen does)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rabbitry.cli import HelpFormatter

TLS_EPILOG = """\
examples:
  rabbitry tls gen --out ./tls a@127.0.0.1 b@127.0.0.1 c@127.0.0.1
  rabbitry tls gen --out ./tls d@10.0.0.7          # adds d, signed by the CA already in ./tls
  rabbitry tls gen --out ./tls --host 10.0.0.8     # any node on 10.0.0.8 (Spark executors)
  rabbitry tls revoke --out ./tls ./tls/d.pem      # d's certificate is refused from now on

Writes DIR/ca.pem and DIR/ca-key.pem (the CA; reused if DIR has one), and per node
DIR/<name>.pem and DIR/<name>-key.pem (keys mode 0600). Each certificate carries a URI SAN
rabbitry://name@host, so it is accepted for that node only, and a DNS/IP SAN for its host, so
HTTPS clients (`rabbitry cluster ... --cacert DIR/ca.pem`) accept it for the control API.
Keep ca-key.pem away from the nodes: whoever holds it can mint node certificates."""


def register(commands: Any) -> None:
    """Add `tls gen` to the `rabbitry` command's subparsers."""
    tls = commands.add_parser(
        "tls",
        help="make the certificates for TLS between nodes (tls gen, tls revoke)",
        description="Certificates for dist over mutual TLS, HTTPS control API and metrics.",
        epilog=TLS_EPILOG,
        formatter_class=HelpFormatter,
    )
    tls.set_defaults(help_parser=tls)
    sub = tls.add_subparsers(title="tls commands", metavar="COMMAND")
    gen = sub.add_parser(
        "gen",
        help="make a CA (or reuse DIR's) and one certificate per NODE",
        description="Make a CA (or reuse the one in DIR) and one certificate per node, and print "
        "the `tls:` lines to paste into each node's config.",
        epilog=TLS_EPILOG,
        formatter_class=HelpFormatter,
    )
    gen.add_argument("--out", required=True, metavar="DIR", help="where to write the files")
    gen.add_argument("nodes", nargs="*", metavar="NODE", help="node names, such as a@127.0.0.1")
    gen.add_argument(
        "--host",
        action="append",
        metavar="HOST",
        help="also make a host certificate (DNS/IP SAN only): it names every node of HOST, "
        "for nodes named at run time such as Spark executors (repeatable)",
    )
    gen.add_argument("--days", type=int, default=825, help="how long the certificates are valid")
    gen.set_defaults(handler=gen_command, help_parser=gen)
    rev = sub.add_parser(
        "revoke",
        help="add certificates to the CA's revocation list (DIR/crl.pem)",
        description="Add each CERT (issued by the CA in DIR) to DIR/crl.pem, signed by that CA, "
        "and print the `crlfile:` line for the nodes' `tls:` section. Copy crl.pem to every "
        "node: a node checks it on every new connection and re-reads it on SIGHUP (or when the "
        "file changes).",
        formatter_class=HelpFormatter,
    )
    rev.add_argument("--out", required=True, metavar="DIR", help="the CA's directory (tls gen's)")
    rev.add_argument("certs", nargs="+", metavar="CERT", help="certificate files to revoke")
    rev.set_defaults(handler=revoke_command, help_parser=rev)


def gen_command(args: argparse.Namespace) -> int:
    from rabbitry.node_config import NODE_NAME
    from rabbitry.tls_gen import generate

    args.host = args.host or []
    if not args.nodes and not args.host:
        print("rabbitry tls gen: name at least one NODE (or --host HOST)", file=sys.stderr)
        return 2
    bad = [n for n in args.nodes if not NODE_NAME.match(n)]
    bad += [h for h in args.host if not NODE_NAME.match(f"x@{h}")]
    if bad:
        print(
            f"rabbitry tls gen: not a node name: {', '.join(bad)} (expected name@host, such as "
            "a@127.0.0.1)",
            file=sys.stderr,
        )
        return 2
    if args.days < 1:
        print(f"rabbitry tls gen: --days must be >= 1, got {args.days}", file=sys.stderr)
        return 2
    out = Path(args.out).resolve()  # absolute paths paste into a config anywhere
    try:
        made, written = generate(
            out,
            list(dict.fromkeys(args.nodes)),
            days=args.days,
            hosts=list(dict.fromkeys(args.host)),
        )
    except (OSError, ValueError) as exc:
        print(f"rabbitry tls gen: {exc}", file=sys.stderr)
        return 1
    print(f"{'made' if made else 'reused'} the CA {out / 'ca.pem'} (its key: {out / 'ca-key.pem'})")
    for files in written:
        print(f"\n# {files.node}: paste into its config\n{files.tls_lines()}", end="")
    return 0


def revoke_command(args: argparse.Namespace) -> int:
    from rabbitry.tls_gen import revoke

    out = Path(args.out).resolve()
    try:
        path, serials = revoke(out, [Path(c) for c in args.certs])
    except (OSError, ValueError) as exc:
        print(f"rabbitry tls revoke: {exc}", file=sys.stderr)
        return 1
    print(f"{path} revokes {len(serials)} certificate(s); in each node's `tls:` section:")
    print(f"  crlfile: {path}")
    return 0
