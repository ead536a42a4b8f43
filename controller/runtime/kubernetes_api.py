"""Just enough of the Kubernetes REST API for the Kubernetes runtime: Pods,
Secrets and ConfigMaps in one namespace (create, get, delete, list, watch),
over HTTPS with the API server's CA, as a client certificate (a
kubeconfig's) or a ServiceAccount token (in a Pod). HTTP/1.1 on asyncio streams, parsed by
httptools (a dependency already): a request per connection, a watch a
connection held open with one JSON event per line."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import http.client
import json
import os
import ssl
import tempfile
import urllib.parse
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import httptools
import yaml

from .kubernetes_watch import Gone

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
WATCH_TIMEOUT_S = 300  # the API server ends a watch after this; PodCache reopens it


async def _close(writer: asyncio.StreamWriter) -> None:
    """Close a connection and wait (briefly) until TLS has closed it too."""
    writer.close()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(writer.wait_closed(), 2)


def _file(kubeconfig: Path, name: str | None) -> str | None:
    """A kubeconfig's file name, relative to its folder (as kubectl reads it)."""
    return str(kubeconfig.parent / Path(name).expanduser()) if name else None


def _inline(data: str | None) -> str | None:
    return base64.b64decode(data).decode() if data else None


def _load_client_cert(tls: ssl.SSLContext, kubeconfig: Path, user: dict[str, Any]) -> None:
    """The user's certificate and key, from files or inline (ssl loads only
    files: inline ones go through a private temporary file, removed at once)."""
    cert, key = user.get("client-certificate"), user.get("client-key")
    if cert and key:
        tls.load_cert_chain(str(_file(kubeconfig, cert)), _file(kubeconfig, key))
        return
    pem = (_inline(user.get("client-certificate-data")) or "") + "\n" + (
        _inline(user.get("client-key-data")) or "")
    fd, name = tempfile.mkstemp(prefix="servefleet-kube-")  # mode 0600
    try:
        with os.fdopen(fd, "w") as f:
            f.write(pem)
        tls.load_cert_chain(name)
    finally:
        os.unlink(name)


def _message(body: bytes) -> str:
    """An error answer's message: a Status object's, or the text as it came
    (a path the API server does not serve answers "404 page not found")."""
    try:
        decoded = json.loads(body)
    except ValueError:
        decoded = None
    if isinstance(decoded, dict) and decoded.get("message"):
        return str(decoded["message"])
    return body.decode(errors="replace").strip()[-500:]


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status


class _Response:
    """httptools' callbacks, gathered: the status, then the body as it comes."""

    def __init__(self) -> None:
        self.status = 0
        self.body = bytearray()
        self.complete = False
        self.parser = httptools.HttpResponseParser(self)

    def on_status(self, _: bytes) -> None:
        self.status = self.parser.get_status_code()

    def on_body(self, data: bytes) -> None:
        self.body += data

    def on_message_complete(self) -> None:
        self.complete = True


class KubeApi:
    def __init__(self, server: str, namespace: str, context: ssl.SSLContext,
                 token: str = "") -> None:
        parsed = urllib.parse.urlsplit(server)
        if parsed.scheme != "https" or not parsed.hostname:
            raise ValueError(f"the API server must be an https:// URL, not {server!r}")
        self._host, self._port = parsed.hostname, parsed.port or 443
        self._namespace = namespace
        self._context = context
        self._token = token

    @property
    def namespace(self) -> str:
        return self._namespace

    @classmethod
    def from_kubeconfig(cls, path: str | Path, namespace: str | None = None) -> KubeApi:
        """From a kubeconfig's current context: the CA and a client certificate
        and key (as files, relative to the kubeconfig's folder, or inline as
        *-data), or a token. The namespace: `namespace`, else the context's,
        else "default". ValueError naming the file and what it lacks."""
        path = Path(path)
        config = yaml.safe_load(path.read_text()) or {}
        current = config.get("current-context")
        context = next((c["context"] for c in config.get("contexts") or []
                        if c["name"] == current), None)
        if context is None:
            raise ValueError(f"{path}: no context {current!r} (its current-context)")
        cluster = next((c["cluster"] for c in config.get("clusters") or []
                        if c["name"] == context.get("cluster")), None)
        user: dict[str, Any] = next((u["user"] for u in config.get("users") or []
                                     if u["name"] == context.get("user")), {})
        if cluster is None or not cluster.get("server"):
            raise ValueError(f"{path}: context {current!r} names no cluster with a server")
        tls = ssl.create_default_context(
            cafile=_file(path, cluster.get("certificate-authority")),
            cadata=_inline(cluster.get("certificate-authority-data")))
        if user.get("client-certificate") or user.get("client-certificate-data"):
            _load_client_cert(tls, path, user)
        return cls(cluster["server"], namespace or context.get("namespace") or "default", tls,
                   user.get("token", ""))

    @classmethod
    def in_cluster(cls, host: str, port: int, namespace: str | None = None,
                   account: Path = SERVICE_ACCOUNT) -> KubeApi:
        """In a Pod: its ServiceAccount's token and CA (files in `account`), and
        its namespace unless `namespace` is given."""
        tls = ssl.create_default_context(cafile=str(account / "ca.crt"))
        own = namespace or (account / "namespace").read_text().strip()
        return cls(f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}",
                   own, tls, (account / "token").read_text().strip())

    def _path(self, kind: str, name: str = "", **query: str) -> str:
        path = f"/api/v1/namespaces/{self._namespace}/{kind}" + (f"/{name}" if name else "")
        return path + (f"?{urllib.parse.urlencode(query)}" if query else "")

    async def _open(self, method: str, path: str, body: bytes,
                    content_type: str = "application/json"
                    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        reader, writer = await asyncio.open_connection(
            self._host, self._port, ssl=self._context, server_hostname=self._host)
        headers = [f"{method} {path} HTTP/1.1", f"Host: {self._host}:{self._port}",
                   "Accept: application/json", "Connection: close",
                   f"Content-Length: {len(body)}"]
        if body:
            headers.append(f"Content-Type: {content_type}")
        if self._token:
            headers.append(f"Authorization: Bearer {self._token}")
        writer.write(("\r\n".join(headers) + "\r\n\r\n").encode() + body)
        await writer.drain()
        return reader, writer

    async def _call(self, method: str, path: str, obj: Any = None,
                    content_type: str = "application/json") -> dict[str, Any]:
        body = json.dumps(obj).encode() if obj is not None else b""
        reader, writer = await self._open(method, path, body, content_type)
        response = _Response()
        try:
            while not response.complete and (data := await reader.read(65536)):
                response.parser.feed_data(data)
        finally:
            await _close(writer)
        if response.status >= 400:
            raise ApiError(response.status, _message(bytes(response.body)))
        return json.loads(response.body or b"{}")

    async def create(self, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        return await self._call("POST", self._path(kind), obj)

    async def delete(self, kind: str, name: str, grace_s: int | None = None) -> None:
        options = {"gracePeriodSeconds": grace_s} if grace_s is not None else None
        try:
            await self._call("DELETE", self._path(kind, name), options)
        except ApiError as e:
            if e.status != 404:
                raise

    async def get(self, kind: str, name: str) -> dict[str, Any] | None:
        """One object of `kind` (pods, secrets, configmaps); None when there is none."""
        try:
            return await self._call("GET", self._path(kind, name))
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    async def patch(self, kind: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """A JSON merge patch (RFC 7386) of one object of `kind`."""
        return await self._call("PATCH", self._path(kind, name), patch,
                                "application/merge-patch+json")

    async def list_objects(self, kind: str, selector: str) -> list[dict[str, Any]]:
        """The objects of `kind` its labelSelector selects, read from the API server."""
        listed = await self._call("GET", self._path(kind, labelSelector=selector))
        return list(listed.get("items", []))

    async def list_pods(self, selector: str) -> tuple[list[dict[str, Any]], str]:
        listed = await self._call("GET", self._path("pods", labelSelector=selector))
        return listed.get("items", []), listed["metadata"]["resourceVersion"]

    async def watch_pods(self, selector: str, resource_version: str
                         ) -> AsyncGenerator[dict[str, Any], None]:
        path = self._path("pods", watch="1", labelSelector=selector,
                          resourceVersion=resource_version, allowWatchBookmarks="true",
                          timeoutSeconds=str(WATCH_TIMEOUT_S))
        async for event in self._watch_events(path):
            yield event

    def pod_log(self, name: str, tail_lines: int = 0, since_time: str = "") -> str:
        """A Pod's log (its last `tail_lines`, or what came since RFC 3339
        `since_time`), blocking: the Runtime's logs calls are. "" when the Pod
        or its log is not there."""
        query = {"timestamps": "false"}
        if tail_lines:
            query["tailLines"] = str(tail_lines)
        if since_time:
            query["sinceTime"] = since_time
        connection = http.client.HTTPSConnection(self._host, self._port, context=self._context,
                                                 timeout=10)
        try:
            headers = {"Authorization": f"Bearer {self._token}"} if self._token else {}
            connection.request("GET", self._path("pods", f"{name}/log", **query),
                               headers=headers)
            response = connection.getresponse()
            data = response.read()
            return data.decode(errors="replace") if response.status == 200 else ""
        except OSError:
            return ""
        finally:
            connection.close()

    # -- custom resources (ServeApplications): one resource of a group/version, in
    # -- this namespace; `api` is "group/version", e.g. "servefleet.io/v1alpha1".

    def _custom_path(self, api: str, plural: str, name: str = "", subresource: str = "",
                     **query: str) -> str:
        path = f"/apis/{api}/namespaces/{self._namespace}/{plural}"
        path += "".join(f"/{part}" for part in (name, subresource) if part)
        return path + (f"?{urllib.parse.urlencode(query)}" if query else "")

    async def get_custom(self, api: str, plural: str, name: str) -> dict[str, Any]:
        return await self._call("GET", self._custom_path(api, plural, name))

    async def get_named(self, api: str, plural: str, name: str) -> dict[str, Any] | None:
        """One object of a named group (apps/v1 deployments, ...); None when there is none."""
        try:
            return await self.get_custom(api, plural, name)
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    async def list_custom(self, api: str, plural: str) -> tuple[list[dict[str, Any]], str]:
        """(the objects, the list's resourceVersion)."""
        listed = await self._call("GET", self._custom_path(api, plural))
        return listed.get("items", []), listed["metadata"]["resourceVersion"]

    def watch_custom(self, api: str, plural: str, resource_version: str
                     ) -> AsyncGenerator[dict[str, Any], None]:
        """Watch events after `resource_version`, bookmarks on; Gone when it is
        too old, ApiError for another refusal."""
        return self._watch_events(self._custom_path(
            api, plural, watch="1", resourceVersion=resource_version,
            allowWatchBookmarks="true", timeoutSeconds=str(WATCH_TIMEOUT_S)))

    async def create_custom(self, api: str, plural: str, obj: dict[str, Any]) -> dict[str, Any]:
        return await self._call("POST", self._custom_path(api, plural), obj)

    async def replace_custom(self, api: str, plural: str, obj: dict[str, Any],
                             subresource: str = "") -> dict[str, Any]:
        """PUT `obj` (with its metadata.resourceVersion: 409 when the object
        changed since); subresource "status" writes only its status."""
        return await self._call("PUT", self._custom_path(api, plural, obj["metadata"]["name"],
                                                         subresource), obj)

    async def delete_custom(self, api: str, plural: str, name: str) -> None:
        try:
            await self._call("DELETE", self._custom_path(api, plural, name))
        except ApiError as e:
            if e.status != 404:
                raise

    async def _watch_events(self, path: str) -> AsyncGenerator[dict[str, Any], None]:
        """One watch stream's events, a JSON object a line (Pods, custom resources)."""
        reader, writer = await self._open("GET", path, b"")
        response = _Response()
        try:
            while not response.complete and (data := await reader.read(65536)):
                response.parser.feed_data(data)
                if response.status == 410:
                    raise Gone("resourceVersion too old")
                if response.status >= 400:
                    continue  # the whole body, for the error below
                while (end := response.body.find(b"\n")) >= 0:
                    line = bytes(response.body[:end])
                    del response.body[:end + 1]
                    if line.strip():
                        yield json.loads(line)
            if response.status >= 400:
                raise ApiError(response.status, _message(bytes(response.body)))
        finally:
            await _close(writer)
