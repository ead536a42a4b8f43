"""The ceiling for bench/data_plane.py: a bare uvicorn + starlette hello app.

    python bench/hello_app.py PORT [sync]

With `sync` the handler is a plain def, which Starlette runs in its thread
pool: the ceiling for the replica's plain-def handlers.
"""

import sys

import uvicorn
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route


async def hello(request):
    return PlainTextResponse("ok")


def hello_sync(request):
    return PlainTextResponse("ok")


app = Starlette(routes=[Route("/{path:path}", hello_sync if sys.argv[2:] == ["sync"] else hello)])

if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning",
                access_log=False)
