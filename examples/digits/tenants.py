"""One digits model per tenant, several per replica (`@multiplexed`).

Deployed by examples/digits/config.yaml as the application `digits-tenants`:

    curl --data-binary @examples/digits/samples/5.png -H 'content-type: image/png' \\
        -H 'serve_multiplexed_model_id: tenant-b' http://127.0.0.1:8000/digits-tenants

The header `serve_multiplexed_model_id` names the tenant; its model is
`tenants/<tenant>.onnx` (train.py writes tenant-a to tenant-e, each trained on
its own fifth of the images). A replica loads a tenant's model on its first
request and keeps at most two, evicting the least recently used; the proxy
sends a tenant's requests to a replica that holds its model. The answer names
the tenant from the model file's own metadata, and the replica (pid) and how
many models it loaded so far. No header is a 400, an unknown tenant a 404.
"""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path

import numpy as np
from classifier import open_session, run
from digit_images import ImageError, image_from_body
from starlette.responses import JSONResponse

from servefleet import deployment, get_multiplexed_model_id, multiplexed

TENANTS = Path(__file__).resolve().parent / "tenants"
TENANT_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")


class TenantModel:
    def __init__(self, path: Path) -> None:
        self.session = open_session(path)
        self.tenant = self.session.get_modelmeta().custom_metadata_map.get("tenant", "")


@deployment(num_replicas=2, max_ongoing_requests=32)
class TenantDigits:
    def __init__(self) -> None:
        self.loads = 0

    @multiplexed(max_num_models_per_replica=2)
    async def get_model(self, tenant: str) -> TenantModel:
        self.loads += 1
        return await asyncio.to_thread(TenantModel, TENANTS / f"{tenant}.onnx")

    async def __call__(self, request) -> JSONResponse:
        tenant = get_multiplexed_model_id()
        if not tenant:
            return JSONResponse({"error": "name the tenant in the header "
                                          "serve_multiplexed_model_id"}, status_code=400)
        if not TENANT_NAME.fullmatch(tenant) or not (TENANTS / f"{tenant}.onnx").is_file():
            return JSONResponse({"error": f"no model for tenant {tenant!r}"}, status_code=404)
        try:
            image = image_from_body(await request.body(), request.headers.get("content-type", ""))
        except ImageError as e:
            return JSONResponse({"error": str(e)}, status_code=400)
        model = await self.get_model(tenant)
        [answer] = run(model.session, image.reshape(1, 64).astype(np.float32))
        return JSONResponse({"tenant": model.tenant, **answer, "replica": os.getpid(),
                             "loads": self.loads})


app = TenantDigits.bind()
