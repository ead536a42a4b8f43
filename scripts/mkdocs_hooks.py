"""MkDocs hooks (mkdocs.yml `hooks:`): links from docs/ to the rest of the
repository.

The pages under docs/ link to source files the way they read on GitHub,
relative to the page (`../controller/server.py`, `../../examples/`). Those
files are not part of the site, so a relative link that leaves docs/ becomes
a link to the file in the repository (`repo_url`, branch `main`), and an
image that lives outside docs/ (the charts in bench/results/) is copied into
the site and shown from there. Anything else stays as written, for MkDocs to
check (`--strict`: a link to a page or anchor that does not exist fails).
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
BRANCH = "main"
IMAGES = (".svg", ".png", ".jpg", ".jpeg", ".gif")
SITE_COPIES = "assets/repo"  # where images from outside docs/ go in the site
# The README's sections before they became pages: links to them from pages
# written earlier (`../README.md#security`) go to the page in the site.
README_SECTIONS = {
    "serve-your-own-model": "getting-started.md#serve-your-own-model",
    "using-it": "guides/deploy.md", "config-files": "guides/config-files.md",
    "the-command-line": "guides/command-line.md", "the-python-sdk": "guides/clients.md",
    "deployments-and-replicas": "guides/deploy.md#deployments-and-replicas",
    "autoscaling": "guides/autoscaling.md", "batching": "guides/batching.md",
    "model-multiplexing": "guides/batching.md#model-multiplexing",
    "request-routers": "guides/routing.md", "websockets": "guides/streaming.md#websockets",
    "the-http-proxy": "guides/http-proxy.md", "grpc-ingress": "guides/grpc.md",
    "xds-proxyless-grpc-and-envoy": "guides/grpc.md#xds-proxyless-grpc-and-envoy",
    "config-streaming-watch": "guides/watch.md",
    "running-several-controllers-against-etcd": "guides/controllers.md",
    "replicas-as-docker-containers": "guides/docker.md",
    "observability": "guides/observability.md", "security": "guides/security.md",
    "figures": "figures.md", "working-on-servefleet": "contributing.md",
}
FENCE = re.compile(r"^\s*(```|~~~)")
LINK = re.compile(r"(!?\[(?:[^\[\]]|\[[^\]]*\])*\]\()(<[^>]+>|[^)\s]+)((?:\s+\"[^\"]*\")?\))")


def _outside_target(page_src: str, target: str) -> tuple[str, str] | None:
    """(repository path, anchor) when `target`, a link in docs/`page_src`,
    leaves docs/; None for links that stay inside it or are not relative."""
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:|^[#/]", target):
        return None
    path, _, anchor = target.partition("#")
    joined = posixpath.normpath(posixpath.join("docs", posixpath.dirname(page_src), path))
    if joined == "docs" or joined.startswith("docs/"):
        return None
    return joined, anchor


def _outside_links(markdown: str, page_src: str):
    """Each link outside fenced code: (match, repository path, anchor)."""
    in_fence = False
    for line in markdown.splitlines(keepends=True):
        if FENCE.match(line):
            in_fence = not in_fence
        if in_fence:
            continue
        for match in LINK.finditer(line):
            found = _outside_target(page_src, match.group(2).strip("<>"))
            if found:
                yield match, *found


def on_files(files: Files, config: Any) -> Files:
    """Copy the images pages show from outside docs/ into the site."""
    wanted = set()
    for page in DOCS.rglob("*.md"):
        src = page.relative_to(DOCS).as_posix()
        for _, path, _ in _outside_links(page.read_text(), src):
            if path.lower().endswith(IMAGES) and (ROOT / path).is_file():
                wanted.add(path)
    for path in sorted(wanted):
        files.append(File.generated(config, f"{SITE_COPIES}/{path}",
                                    abs_src_path=str(ROOT / path)))
    return files


def repository_url(config: Any, path: str, anchor: str) -> str:
    kind = "tree" if (ROOT / path).is_dir() else "blob"
    url = f"{config['repo_url'].rstrip('/')}/{kind}/{BRANCH}/{path}"
    return f"{url}#{anchor}" if anchor else url


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    src = page.file.src_uri
    out, in_fence = [], False
    for line in markdown.splitlines(keepends=True):
        if FENCE.match(line):
            in_fence = not in_fence
        if not in_fence:
            line = LINK.sub(lambda m: _rewrite(m, src, config, files), line)
        out.append(line)
    return "".join(out)


def _rewrite(match: re.Match, src: str, config: Any, files: Files) -> str:
    target = match.group(2).strip("<>")
    found = _outside_target(src, target)
    if not found:
        return match.group(0)
    path, anchor = found
    copy = f"{SITE_COPIES}/{path}"
    if path == "README.md" and anchor in README_SECTIONS:
        new = posixpath.relpath(README_SECTIONS[anchor], posixpath.dirname(src) or ".")
    elif files.get_file_from_path(copy) is not None:
        new = posixpath.relpath(copy, posixpath.dirname(src) or ".")
    else:
        new = repository_url(config, path, anchor)
    return f"{match.group(1)}{new}{match.group(3)}"
