"""Request bodies to 8x8 digit images, the way `load_digits` stores them.

`image_from_body(body, content_type)` returns a float32 array of shape (8, 8)
with integer values 0-16 (16 = full ink), or raises ImageError with a message
for the client (the deployments answer it as a 400):

- a PNG (the content type `image/png`, or a body starting with PNG's
  signature, as `curl --data-binary @x.png` sends without a type): decoded with
  Pillow, converted to grayscale, read as dark ink on a light background,
  averaged down to 8x8 and scaled to 0-16 in whole steps, as load_digits
  counts pixels. It must be square and at least 8x8 pixels (at most
  MAX_PIXELS a side);
- JSON `{"image": [[8 rows of 8 numbers]]}` or `{"image": [64 numbers]}`,
  numbers from 0 to 16.

Anything else (text, another image format, a wrong size, numbers out of
range) is an ImageError naming what was wrong.
"""

from __future__ import annotations

import io
import json

import numpy as np
from PIL import Image, UnidentifiedImageError

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MAX_PIXELS = 1024
JSON_SHAPE = 'JSON {"image": [[8 rows of 8 numbers from 0 to 16]]}'


class ImageError(ValueError):
    """The body is not a digit image this example reads; the message says why."""


def image_from_body(body: bytes, content_type: str = "") -> np.ndarray:
    kind = content_type.split(";")[0].strip().lower()
    if kind.startswith("image/") or body.startswith(PNG_SIGNATURE):
        return image_from_png(body)
    if not body:
        raise ImageError(f"the body is empty: send a PNG (image/png) or {JSON_SHAPE}")
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ImageError(f"the body ({kind or 'no content type'}) is neither a PNG image "
                         f"nor {JSON_SHAPE}") from None
    if not isinstance(data, dict) or "image" not in data:
        raise ImageError(f"the JSON body has no \"image\": expected {JSON_SHAPE}")
    return image_from_numbers(data["image"])


def image_from_numbers(value: object) -> np.ndarray:
    try:
        image = np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError):
        raise ImageError("\"image\" must hold numbers only (8 rows of 8, or 64)") from None
    if image.shape not in ((8, 8), (64,)):
        raise ImageError(f"wrong image size: expected 8x8 numbers (8 rows of 8, or 64), "
                         f"got shape {list(image.shape)}")
    if not np.isfinite(image).all() or image.min() < 0 or image.max() > 16:
        raise ImageError("pixel values must be numbers from 0 to 16")
    return image.reshape(8, 8)


def image_from_png(body: bytes) -> np.ndarray:
    try:
        with Image.open(io.BytesIO(body), formats=["PNG"]) as png:
            width, height = png.size
            if width != height or width < 8 or width > MAX_PIXELS:
                raise ImageError(f"wrong image size: {width}x{height} pixels; expected a square "
                                 f"image from 8x8 to {MAX_PIXELS}x{MAX_PIXELS}")
            gray = png.convert("L").resize((8, 8), Image.Resampling.BOX)
    except (UnidentifiedImageError, Image.DecompressionBombError, OSError, SyntaxError):
        raise ImageError("the body is not a PNG image Pillow can read") from None
    ink = 255.0 - np.asarray(gray, dtype=np.float32)
    return np.rint(ink * (16 / 255)).astype(np.float32)
