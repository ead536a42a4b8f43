"""A TCP relay across network namespaces: it accepts on a listening socket
it inherits (made on the machine's loopback by scripts/k8s start) and
connects, from the namespace it runs in (the control plane's), to the API
server there. So kubectl on this machine reaches 127.0.0.1:PORT while the
API server's only addresses are inside the cluster's namespaces.

    python relay.py LISTEN_FD TARGET_HOST TARGET_PORT
"""

from __future__ import annotations

import asyncio
import socket
import sys


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def main(fd: int, host: str, port: int) -> None:
    listener = socket.socket(fileno=fd)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(host, port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    server = await asyncio.start_server(serve, sock=listener)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), sys.argv[2], int(sys.argv[3])))
