"""The gRPC API's reference page (docs/reference/grpc.md), written from the
protos in proto/servefleet/v1: every service with its methods, every message
with its fields, every enum with its values, each with its comment.

    python -m servefleet._private.proto_docs docs/reference/grpc.md

protoc (grpcio-tools, the [dev] extra) parses the files with their comments
into descriptors; this walks them. tests/test_reference_pages.py checks that
the committed page is current.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from google.protobuf import descriptor_pb2 as pb

ROOT = Path(__file__).resolve().parents[2]
PROTO_ROOT = ROOT / "proto"
PACKAGE_DIR = "servefleet/v1"
PAGE_PATH = "docs/reference/grpc.md"

# Field numbers of descriptor.proto, as SourceCodeInfo paths use them.
FILE_MESSAGES, FILE_ENUMS, FILE_SERVICES, FILE_SYNTAX = 4, 5, 6, 12
MESSAGE_FIELDS, MESSAGE_NESTED, MESSAGE_ENUMS = 2, 3, 4
ENUM_VALUES, SERVICE_METHODS = 2, 2

SCALARS = {number: name.removeprefix("TYPE_").lower()
           for name, number in pb.FieldDescriptorProto.Type.items()}


def descriptors() -> pb.FileDescriptorSet:
    """The package's files, parsed by protoc with their comments."""
    from grpc_tools import protoc  # type: ignore[import-untyped]  # the [dev] extra

    includes = Path(protoc.__file__).parent / "_proto"
    files = sorted(str(p.relative_to(PROTO_ROOT))
                   for p in (PROTO_ROOT / PACKAGE_DIR).glob("*.proto"))
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "set.pb")
        code = protoc.main(["protoc", f"-I{PROTO_ROOT}", f"-I{includes}", "--include_source_info",
                            f"--descriptor_set_out={out}", *files])
        if code != 0:
            raise RuntimeError(f"protoc failed ({code}) on {files}")
        return pb.FileDescriptorSet.FromString(Path(out).read_bytes())


class Comments:
    """The comments of one file, by SourceCodeInfo path."""

    def __init__(self, file: pb.FileDescriptorProto) -> None:
        self.by_path = {tuple(loc.path): loc for loc in file.source_code_info.location}

    def leading(self, *path: int) -> str:
        loc = self.by_path.get(path)
        return _clean(loc.leading_comments + loc.trailing_comments) if loc else ""

    def detached(self, *path: int) -> str:
        loc = self.by_path.get(path)
        return "\n\n".join(_clean(c) for c in loc.leading_detached_comments) if loc else ""


def _clean(comment: str) -> str:
    return "\n".join(line.strip() for line in comment.strip().splitlines())


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _anchor(name: str) -> str:
    """The heading id MkDocs gives a heading `name` (`Outer.Inner` -> outerinner)."""
    return "".join(c for c in name.lower() if c.isalnum() or c in "_-")


def _type_name(full: str, own: set[str]) -> str:
    """`.servefleet.v1.DeploymentSpec` -> a link to its heading on this page."""
    name = full.lstrip(".")
    short = name.removeprefix("servefleet.v1.")
    return f"[{short}](#{_anchor(short)})" if short in own else f"`{name}`"


def _field_type(field: pb.FieldDescriptorProto, own: set[str],
                maps: dict[str, pb.DescriptorProto]) -> str:
    if field.type_name and field.type_name.lstrip(".") in maps:
        entry = maps[field.type_name.lstrip(".")]
        key, value = entry.field
        return f"map<{_field_type(key, own, maps)}, {_field_type(value, own, maps)}>"
    kind = _type_name(field.type_name, own) if field.type_name else SCALARS[field.type]
    if field.label == pb.FieldDescriptorProto.LABEL_REPEATED:
        return f"repeated {kind}"
    return f"optional {kind}" if field.proto3_optional else kind


def _messages(prefix: str, messages, path: tuple[int, ...]
              ) -> Iterator[tuple[str, pb.DescriptorProto, tuple[int, ...]]]:
    for i, message in enumerate(messages):
        if message.options.map_entry:
            continue
        name = f"{prefix}{message.name}"
        yield name, message, (*path, i)
        yield from _messages(f"{name}.", message.nested_type, (*path, i, MESSAGE_NESTED))


def _enums(prefix: str, file: pb.FileDescriptorProto
           ) -> Iterator[tuple[str, pb.EnumDescriptorProto, tuple[int, ...]]]:
    for i, enum in enumerate(file.enum_type):
        yield enum.name, enum, (FILE_ENUMS, i)
    for name, message, path in _messages("", file.message_type, (FILE_MESSAGES,)):
        for i, enum in enumerate(message.enum_type):
            yield f"{name}.{enum.name}", enum, (*path, MESSAGE_ENUMS, i)


def _file_section(file: pb.FileDescriptorProto, own: set[str],
                  maps: dict[str, pb.DescriptorProto]) -> list[str]:
    notes = Comments(file)
    lines = [f"## {Path(file.name).name}", ""]
    if intro := "\n\n".join(filter(None, [notes.detached(FILE_SYNTAX),
                                            notes.leading(FILE_SYNTAX)])):
        lines += [intro, ""]
    for i, service in enumerate(file.service):
        lines += [f"### {service.name}", ""]
        if text := notes.leading(FILE_SERVICES, i):
            lines += [text, ""]
        lines += ["| Method | Request | Response | Description |", "| --- | --- | --- | --- |"]
        for j, method in enumerate(service.method):
            request = _type_name(method.input_type, own)
            response = _type_name(method.output_type, own)
            if method.client_streaming:
                request = f"stream {request}"
            if method.server_streaming:
                response = f"stream {response}"
            lines.append(f"| `{method.name}` | {request} | {response} | "
                         f"{_cell(notes.leading(FILE_SERVICES, i, SERVICE_METHODS, j))} |")
        lines.append("")
    for name, message, path in _messages("", file.message_type, (FILE_MESSAGES,)):
        lines += [f"### {name}", ""]
        if text := notes.leading(*path):
            lines += [text, ""]
        if message.field:
            lines += ["| Field | Number | Type | Description |", "| --- | --- | --- | --- |"]
            for k, field in enumerate(message.field):
                lines.append(f"| `{field.name}` | {field.number} | "
                             f"{_field_type(field, own, maps)} | "
                             f"{_cell(notes.leading(*path, MESSAGE_FIELDS, k))} |")
            lines.append("")
    for name, enum, path in _enums("", file):
        lines += [f"### {name}", ""]
        if text := notes.leading(*path):
            lines += [text, ""]
        lines += ["| Value | Number | Description |", "| --- | --- | --- |"]
        for k, value in enumerate(enum.value):
            lines.append(f"| `{value.name}` | {value.number} | "
                         f"{_cell(notes.leading(*path, ENUM_VALUES, k))} |")
        lines.append("")
    return lines


def _collect(package: str, prefix: str, messages, own: set[str],
             maps: dict[str, pb.DescriptorProto]) -> None:
    """The page's own type names (messages, their enums) and the map entries."""
    for message in messages:
        full = f"{prefix}{message.name}"
        if message.options.map_entry:
            maps[f"{package}.{full}"] = message
            continue
        own.add(full)
        own.update(f"{full}.{e.name}" for e in message.enum_type)
        _collect(package, f"{full}.", message.nested_type, own, maps)


def page() -> str:
    files = sorted((f for f in descriptors().file if f.name.startswith(PACKAGE_DIR + "/")),
                   key=lambda f: (not f.service, f.name))  # services first
    own: set[str] = set()
    maps: dict[str, pb.DescriptorProto] = {}
    for file in files:
        _collect(file.package, "", file.message_type, own, maps)
        own.update(e.name for e in file.enum_type)
    lines = ["# gRPC API reference", "",
             f"<!-- Generated by `python -m servefleet._private.proto_docs {PAGE_PATH}` from",
             f"proto/{PACKAGE_DIR}/*.proto: do not edit. -->", "",
             f"The public API, package `servefleet.v1`, from the protos in "
             f"[`proto/{PACKAGE_DIR}`](../../proto/{PACKAGE_DIR}): every service, message "
             "and enum with the comments the files give them. How to call it from Python, "
             "Go, Java, Node or `grpcurl` is in "
             "[Clients and the API from any language](../guides/clients.md).", ""]
    for file in files:
        lines += _file_section(file, own, maps)
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(f"usage: python -m servefleet._private.proto_docs {PAGE_PATH}", file=sys.stderr)
        return 2
    Path(argv[0]).write_text(page())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
