"""HAProxy's master CLI, the runtime API of every HAProxy process, over its Unix socket.

One connection per command, as the master CLI works without a prompt: the
command is written, the write side closed, and the answer is everything
read until HAProxy closes. `@1 ` before a command sends it to the current
worker (the one serving since the last reload); without it, to the master.
"""

from __future__ import annotations

import asyncio

# A command that takes longer means HAProxy is stuck or gone.
COMMAND_TIMEOUT_S = 5.0


class CliError(Exception):
    """The command could not be sent or answered (HAProxy not running, say)."""


class MasterCli:
    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path

    async def master(self, command: str) -> str:
        """`command`'s answer from the master process."""
        return await self._ask(command)

    async def worker(self, command: str) -> str:
        """`command`'s answer from the current worker."""
        return await self._ask("@1 " + command)

    async def _ask(self, command: str) -> str:
        if "\n" in command or ";" in command:
            raise ValueError(f"one command at a time: {command!r}")
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_unix_connection(self.socket_path), COMMAND_TIMEOUT_S)
        except (OSError, TimeoutError) as e:
            raise CliError(f"HAProxy's master CLI at {self.socket_path}: {e}") from None
        try:
            writer.write(command.encode() + b"\n")
            await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()
            answer = await asyncio.wait_for(reader.read(), COMMAND_TIMEOUT_S)
        except (OSError, TimeoutError, RuntimeError) as e:
            # uvloop raises RuntimeError writing to a connection the other end
            # closed as it was made (HAProxy's master can, while it starts).
            raise CliError(f"HAProxy did not answer {command!r}: {e}") from None
        finally:
            writer.close()
        return answer.decode(errors="replace")
