"""The ceiling for bench/data_plane.py: a bare uvicorn + starlette hello app.

    python bench/hello_app.py PORT
"""

import sys

import uvicorn
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route


async def hello(request):
    return PlainTextResponse("ok")


app = Starlette(routes=[Route("/{path:path}", hello)])

if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning",
                access_log=False)
