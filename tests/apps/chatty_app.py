"""A plain `def` deployment that logs through the standard logging module."""

from __future__ import annotations

import logging

logger = logging.getLogger("chatty")


def chatty(request) -> str:
    logger.warning("user code heard %s", request.query_params.get("q", ""))
    return "ok"
