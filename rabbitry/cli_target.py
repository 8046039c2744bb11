"""Which node a `rabbitry cluster` command talks to, and how: its control address, the cluster
cookie and the CA, from flags or from the node's own config file (`--config node.yaml`).

A newcomer who started a node with `rabbitry node start --config a.yaml` already wrote down
everything the CLI needs in that file; asking for it again (and for the CA path of a TLS
cluster) is how README commands fail as written. Flags win over the file, so an operator can
still point the CLI at another address or CA.
"""

from __future__ import annotations

import argparse
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rabbitry.control import ControlClient
from rabbitry.node_config import NodeConfigError, _NodeChecker
from supervisors import read_config_file

_WILDCARD = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


class TargetError(Exception):
    """A usage or config mistake: the command exits 2 with this message."""


@dataclass
class Target:
    """Where the control API is and what it takes to talk to it."""

    host: str
    port: int
    cookie: bytes = field(repr=False)
    cafile: str | None
    https: bool

    def client(self, timeout: float) -> ControlClient:
        return ControlClient(
            self.host,
            self.port,
            self.cookie,
            timeout=timeout,
            cafile=self.cafile if self.https else None,
            https=self.https,
        )


def add_target_arguments(parser: argparse.ArgumentParser) -> None:
    """--config, --control, --cacert, --cookie-file and --timeout on one `cluster` command."""
    parser.add_argument(
        "--config",
        metavar="NODE.yaml",
        help="the node's config file: the control address, the cookie (cookie_file or cookie) "
        "and the CA (tls.cafile) are read from it; --control, --cookie-file and --cacert win "
        "when given",
    )
    parser.add_argument(
        "--control",
        metavar="[https://]HOST:PORT",
        help="the node's control API address (https:// for a node with `tls:`); "
        "default: the `control:` of --config",
    )
    parser.add_argument(
        "--cacert",
        metavar="FILE",
        help="the cluster's CA file, to check the node's certificate over HTTPS; "
        "default: the `tls.cafile` of --config, else $RABBITRY_CACERT",
    )
    parser.add_argument(
        "--cookie-file",
        metavar="FILE",
        help="the cluster cookie file (mode 0600); default: the cookie of --config, else "
        "$RABBITRY_COOKIE_FILE, else ./cookie",
    )
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the node")
    parser.set_defaults(help_parser=parser)


def client_from_args(args: argparse.Namespace) -> ControlClient:
    """The control client the flags (and --config) describe; TargetError on a mistake."""
    return resolve_target(args).client(args.timeout)


def resolve_target(args: argparse.Namespace) -> Target:
    """Flags first, then the node's config, then the environment and ./cookie."""
    config = _ConfigTarget(args.config) if getattr(args, "config", None) else None
    if args.control:
        scheme, host, port = _parse_control(args.control)
    elif config is not None:
        scheme, (host, port) = "", config.control()
    else:
        raise TargetError(
            "say which node: --config NODE.yaml (the node's config file) or --control HOST:PORT"
        )
    cacert = args.cacert
    if cacert is None and config is not None and scheme != "http":
        cacert = config.cafile()
    if cacert is None:
        cacert = os.environ.get("RABBITRY_CACERT") or None
    if scheme == "http" and args.cacert:
        raise TargetError("--cacert is for HTTPS; drop it, or write https:// in --control")
    if cacert is not None and not os.access(cacert, os.R_OK):
        flag = "--cacert" if args.cacert else "tls.cafile" if config else "$RABBITRY_CACERT"
        raise TargetError(f"cannot read the CA file {cacert} ({flag})")
    https = scheme == "https" or (scheme == "" and cacert is not None)
    if args.cookie_file:
        cookie = _read_cookie_file(Path(args.cookie_file))
    elif config is not None:
        cookie = config.cookie()
    else:
        cookie = _read_cookie_file(Path(os.environ.get("RABBITRY_COOKIE_FILE") or "cookie"))
    return Target(host, port, cookie, cacert if https else None, https)


def _parse_control(text: str) -> tuple[str, str, int]:
    scheme, sep, address = text.partition("://")
    if not sep:
        scheme, address = "", text
    host, sep, port = address.rstrip("/").rpartition(":")
    if scheme not in ("", "http", "https") or not sep or not port.isdigit():
        raise TargetError(
            f"--control must be [https://]HOST:PORT, such as 127.0.0.1:7101; got {text!r}"
        )
    return scheme, host.strip("[]"), int(port)


def _read_cookie_file(path: Path) -> bytes:
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
        cookie = path.read_text().strip().encode()
    except OSError as exc:
        raise TargetError(f"cannot read the cookie file {path}: {exc.strerror or exc}") from None
    if mode & 0o077:
        raise TargetError(
            f"the cookie file {path} has mode {mode:04o}; anyone who can read it can control "
            f"the cluster: run `chmod 600 {path}`"
        )
    if not cookie:
        raise TargetError(f"the cookie file {path} is empty")
    return cookie


class _ConfigTarget:
    """The three things the CLI needs from a node config, checked as `node start` checks
    them (same messages, with the key and the line), and nothing else: the CLI must work
    where the node's tree or certificate key cannot be read."""

    def __init__(self, file: str) -> None:
        path = Path(file)
        try:
            self.data: Any = read_config_file(path, file, NodeConfigError)
        except NodeConfigError as exc:
            raise TargetError(f"--config: {exc}") from None
        if not isinstance(self.data, dict) or not self.data:
            raise TargetError(f"--config: {file}: expected a node config mapping (node, listen…)")
        self.file = file
        self.check = _NodeChecker(file, path.resolve().parent)

    def control(self) -> tuple[str, int]:
        if "control" not in self.data:
            raise TargetError(
                f"--config: {self.file} has no `control:` key, so that node serves no control "
                "API; add one (such as `control: 127.0.0.1:7101`) and restart the node"
            )
        try:
            address = self.check.control(self.data, tls="tls" in self.data)
        except NodeConfigError as exc:
            raise TargetError(f"--config: {exc}") from None
        if address is None:
            raise TargetError(f"--config: {self.file} has no `control:` address")
        # A node that listens on every address is reached on loopback.
        return _WILDCARD.get(address.host, address.host), address.port

    def cafile(self) -> str | None:
        section = self.data.get("tls")
        if section is None:
            return None
        try:
            if not isinstance(section, dict):
                self.check.fail(
                    "tls", "a mapping with certfile, keyfile and cafile", at=(self.data, "tls")
                )
            self.check.require(section, "tls", "cafile", "a path to the cluster's CA file")
            return self.check.path_value(section, "tls", "cafile")
        except NodeConfigError as exc:
            raise TargetError(f"--config: {exc}") from None

    def cookie(self) -> bytes:
        try:
            return self.check.cookie(self.data)
        except NodeConfigError as exc:
            raise TargetError(f"--config: {exc}") from None
