"""A streaming endpoint: the response goes out chunk by chunk as it is produced.

    curl -N 'http://127.0.0.1:8000/stream?n=5'
"""

from __future__ import annotations

import asyncio

from servefleet import deployment


@deployment(max_ongoing_requests=50)
async def count(request):
    n = min(int(request.query_params.get("n", "10")), 1000)

    async def chunks():
        for i in range(n):
            yield f"token {i}\n"
            await asyncio.sleep(0.1)

    return chunks()


app = count.bind()
