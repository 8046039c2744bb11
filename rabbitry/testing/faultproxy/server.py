"""The Toxiproxy-compatible HTTP API and the proxies it manages, on one asyncio loop.

The HTTP handler is a minimal HTTP/1.1 server on asyncio streams (keep-alive, Content-Length
bodies): the API is small and the project takes no web framework dependency for it. Any
malformed request is answered with a 400 and logged; it never takes the server down.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any
from urllib.parse import unquote, urlsplit

from rabbitry.testing.faultproxy.link import ClientSide, Link
from rabbitry.testing.faultproxy.model import (
    VERSION,
    ApiError,
    ProxySpec,
    Toxic,
    parse_attributes,
    parse_proxy,
    parse_toxic,
    parse_toxicity,
    split_hostport,
)

log = logging.getLogger("rabbitry.faultproxy")

MAX_HEADER_BYTES = 64 * 1024
MAX_BODY_BYTES = 8 * 1024 * 1024
REASONS = {
    200: "OK",
    201: "Created",
    204: "No Content",
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    413: "Payload Too Large",
    500: "Internal Server Error",
}


class Proxy:
    """One listening proxy: its toxics (in insertion order) and its live connections."""

    def __init__(self, spec: ProxySpec) -> None:
        self.name = spec.name
        self.listen = spec.listen
        self.upstream = spec.upstream
        self.enabled = False
        self.toxics: list[Toxic] = []
        self.links: set[Link] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        """Every pump task of every link, so that stop() can wait for the cancelled ones."""
        self.server: asyncio.Server | None = None

    def to_json(self) -> dict[str, Any]:
        """Toxiproxy's field order: name, listen, upstream, enabled, toxics."""
        return {
            "name": self.name,
            "listen": self.listen,
            "upstream": self.upstream,
            "enabled": self.enabled,
            "toxics": self.toxics_json(),
        }

    def toxics_json(self) -> list[dict[str, Any]]:
        """Upstream toxics first, then downstream, each in insertion order."""
        return [
            t.to_json() for s in ("upstream", "downstream") for t in self.toxics if t.stream == s
        ]

    async def start(self) -> None:
        """Bind the listener; port 0 is rewritten to the port actually bound."""
        if self.enabled:
            return
        host, port = split_hostport(self.listen)
        try:
            loop = asyncio.get_running_loop()
            self.server = await loop.create_server(
                lambda: ClientSide(self), host, port, backlog=1024
            )
        except OSError as exc:
            raise ApiError(500, f"listen tcp {self.listen}: {exc.strerror or exc}") from exc
        bound = self.server.sockets[0].getsockname()
        shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
        self.listen = f"{shown}:{bound[1]}"
        self.enabled = True

    async def stop(self) -> None:
        """Close the listener and drop every open connection."""
        self.enabled = False
        if self.server is not None:
            self.server.close()
            self.server = None
        for link in list(self.links):
            link.close()
        tasks = list(self.tasks)
        for task in tasks:  # pending upstream dials too: a blackholed upstream must not hang us
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def add_toxic(self, toxic: Toxic) -> None:
        """Add a toxic and apply it to live connections."""
        if any(t.name == toxic.name for t in self.toxics):
            raise ApiError(409, "toxic already exists")
        self.toxics.append(toxic)
        for link in list(self.links):
            link.attach(toxic)

    def remove_toxic(self, toxic: Toxic) -> None:
        """Remove a toxic from the chain and from live connections."""
        self.toxics.remove(toxic)
        for link in list(self.links):
            link.detach(toxic)

    def find_toxic(self, name: str) -> Toxic:
        """The named toxic, or 404."""
        for toxic in self.toxics:
            if toxic.name == name:
                return toxic
        raise ApiError(404, "toxic not found")


class FaultProxyServer:
    """A Toxiproxy-compatible server: the HTTP API plus every proxy, in one asyncio loop."""

    def __init__(self, host: str = "127.0.0.1", port: int = 8474) -> None:
        self.host = host
        self.port = port
        self.proxies: dict[str, Proxy] = {}
        self.server: asyncio.Server | None = None
        self.lock = asyncio.Lock()
        self.http_tasks: set[asyncio.Task[Any]] = set()

    @property
    def address(self) -> str:
        """host:port the API is bound to (the real port once started)."""
        return f"{self.host}:{self.port}"

    async def start(self) -> None:
        """Bind the API listener; port 0 becomes the bound port."""
        self.server = await asyncio.start_server(self._serve_http, self.host, self.port)
        self.port = self.server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        """Stop the API and every proxy."""
        if self.server is not None:
            self.server.close()
        for proxy in list(self.proxies.values()):
            await proxy.stop()
        self.proxies.clear()
        tasks = list(self.http_tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # ------------------------------------------------------------------ HTTP plumbing

    async def _serve_http(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        task = asyncio.current_task()
        if task is not None:
            self.http_tasks.add(task)
            task.add_done_callback(self.http_tasks.discard)
        try:
            while True:
                keep_alive = await self._one_request(reader, writer)
                if not keep_alive:
                    break
        except (ConnectionError, asyncio.IncompleteReadError, OSError):
            pass
        except Exception:
            log.exception("faultproxy: unexpected error serving %s", peer)
        finally:
            writer.close()

    async def _one_request(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            if exc.partial.strip():
                await self._send(writer, 400, _error(400, "malformed request"), False)
            return False
        except asyncio.LimitOverrunError:
            await self._send(writer, 400, _error(400, "request header too large"), False)
            return False
        try:
            lines = head.decode("latin-1").split("\r\n")
            method, target, version = lines[0].split(" ")
            headers: dict[str, str] = {}
            for line in lines[1:]:
                if line:
                    key, _, value = line.partition(":")
                    headers[key.strip().lower()] = value.strip()
            length = int(headers.get("content-length", "0") or "0")
            if length < 0 or "chunked" in headers.get("transfer-encoding", "").lower():
                raise ValueError("unsupported body encoding")
        except ValueError as exc:
            log.info(
                "faultproxy: bad HTTP request from %s: %s", writer.get_extra_info("peername"), exc
            )
            await self._send(writer, 400, _error(400, "malformed request"), False)
            return False
        if length > MAX_BODY_BYTES:
            await self._send(writer, 413, _error(413, "request body too large"), False)
            return False
        body = await reader.readexactly(length) if length else b""
        keep_alive = version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
        payload: bytes | None
        if headers.get("user-agent", "").startswith("Mozilla/"):
            status, payload = 403, _error(403, "User agent not allowed")
        else:
            async with self.lock:
                status, payload = await self._dispatch(method.upper(), urlsplit(target).path, body)
        await self._send(writer, status, payload, keep_alive)
        return keep_alive

    async def _send(
        self, writer: asyncio.StreamWriter, status: int, payload: bytes | None, keep_alive: bool
    ) -> None:
        body = payload or b""
        head = [f"HTTP/1.1 {status} {REASONS.get(status, 'Status')}"]
        if status != 204:
            kind = (
                "text/plain; charset=utf-8" if status >= 400 else "application/json; charset=utf-8"
            )
            head.append(f"Content-Type: {kind}")
            head.append(f"Content-Length: {len(body)}")
        head.append("Connection: keep-alive" if keep_alive else "Connection: close")
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + (body if status != 204 else b""))
        await writer.drain()

    async def _dispatch(self, method: str, path: str, body: bytes) -> tuple[int, bytes | None]:
        parts = [unquote(p) for p in path.strip("/").split("/")] if path.strip("/") else []
        try:
            return await self._route(method, parts, body)
        except ApiError as exc:
            return exc.status, _error(exc.status, exc.message)
        except Exception as exc:
            log.exception("faultproxy: %s %s failed", method, path)
            return 500, _error(500, str(exc))

    # ------------------------------------------------------------------ routes

    async def _route(self, method: str, parts: list[str], body: bytes) -> tuple[int, bytes | None]:
        n = len(parts)
        if parts == ["version"] and method == "GET":
            return 200, _json({"version": VERSION})
        if parts == ["reset"] and method == "POST":
            await self.reset()
            return 204, None
        if parts == ["populate"] and method == "POST":
            return await self._populate(_parse_json(body))
        if n >= 1 and parts[0] == "proxies":
            if n == 1:
                if method == "GET":
                    return 200, _json({k: p.to_json() for k, p in self.proxies.items()})
                if method == "POST":
                    return 201, _json(
                        (await self.create_proxy(parse_proxy(_parse_json(body)))).to_json()
                    )
            else:
                proxy = self._proxy(parts[1])
                if n == 2:
                    if method == "GET":
                        return 200, _json(proxy.to_json())
                    if method in ("POST", "PATCH"):
                        await self._update_proxy(proxy, _parse_json(body))
                        return 200, _json(proxy.to_json())
                    if method == "DELETE":
                        await proxy.stop()
                        del self.proxies[proxy.name]
                        return 204, None
                elif parts[2] == "toxics" and n == 3:
                    if method == "GET":
                        return 200, _json(proxy.toxics_json())
                    if method == "POST":
                        toxic = parse_toxic(_parse_json(body))
                        proxy.add_toxic(toxic)
                        return 200, _json(toxic.to_json())
                elif parts[2] == "toxics" and n == 4:
                    toxic = proxy.find_toxic(parts[3])
                    if method == "GET":
                        return 200, _json(toxic.to_json())
                    if method in ("POST", "PATCH"):
                        data = _parse_json(body)
                        if not isinstance(data, dict):
                            raise ApiError(400, "bad request body: expected a JSON object")
                        attrs = parse_attributes(
                            toxic.type, data.get("attributes"), toxic.attributes
                        )
                        toxicity = parse_toxicity(data["toxicity"]) if "toxicity" in data else None
                        toxic.attributes = attrs
                        if toxicity is not None:
                            toxic.toxicity = toxicity
                        return 200, _json(toxic.to_json())
                    if method == "DELETE":
                        proxy.remove_toxic(toxic)
                        return 204, None
                else:
                    raise ApiError(404, "404 page not found")
            raise ApiError(405, "method not allowed")
        raise ApiError(404, "404 page not found")

    def _proxy(self, name: str) -> Proxy:
        proxy = self.proxies.get(name)
        if proxy is None:
            raise ApiError(404, "proxy not found")
        return proxy

    async def create_proxy(self, spec: ProxySpec) -> Proxy:
        """Create and (if enabled) start a proxy; 409 if the name is taken."""
        if spec.name in self.proxies:
            raise ApiError(409, "proxy already exists")
        proxy = Proxy(spec)
        if spec.enabled:
            await proxy.start()
        self.proxies[spec.name] = proxy
        return proxy

    async def _update_proxy(self, proxy: Proxy, data: Any) -> None:
        if not isinstance(data, dict):
            raise ApiError(400, "bad request body: expected a JSON object")
        listen = data.get("listen") or proxy.listen
        upstream = data.get("upstream") or proxy.upstream
        enabled = data.get("enabled", proxy.enabled)
        if (
            not isinstance(listen, str)
            or not isinstance(upstream, str)
            or not isinstance(enabled, bool)
        ):
            raise ApiError(400, "bad request body: wrong field type")
        split_hostport(listen)
        split_hostport(upstream)
        if listen != proxy.listen or upstream != proxy.upstream:
            was = proxy.enabled
            await proxy.stop()
            proxy.listen, proxy.upstream = listen, upstream
            if was and enabled:
                await proxy.start()
        if enabled and not proxy.enabled:
            await proxy.start()
        elif not enabled and proxy.enabled:
            await proxy.stop()

    async def _populate(self, data: Any) -> tuple[int, bytes | None]:
        if not isinstance(data, list):
            raise ApiError(400, "bad request body: expected a JSON array of proxies")
        specs: list[ProxySpec] = []
        try:
            for i, item in enumerate(data):
                specs.append(parse_proxy(item, f" at proxy {i + 1}"))
        except ApiError as exc:
            return exc.status, _error(exc.status, exc.message, proxies=[])
        done: list[dict[str, Any]] = []
        for spec in specs:
            existing = self.proxies.get(spec.name)
            try:
                if existing is not None:
                    same_listen = spec.listen == existing.listen or spec.listen.endswith(":0")
                    if same_listen and spec.upstream == existing.upstream:
                        done.append(existing.to_json())
                        continue
                    await existing.stop()
                    del self.proxies[spec.name]
                done.append((await self.create_proxy(spec)).to_json())
            except ApiError as exc:
                return exc.status, _error(exc.status, exc.message, proxies=done)
        return 201, _json({"proxies": done or None})

    async def reset(self) -> None:
        """Re-enable every proxy and remove every toxic."""
        for proxy in self.proxies.values():
            for toxic in list(proxy.toxics):
                proxy.remove_toxic(toxic)
            if not proxy.enabled:
                await proxy.start()


def _json(value: Any) -> bytes:
    return json.dumps(value).encode() + b"\n"


def _error(status: int, message: str, **extra: Any) -> bytes:
    return _json({"error": message, "status": status, **extra})


def _parse_json(body: bytes) -> Any:
    try:
        return json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ApiError(400, f"bad request body: {exc}") from exc
