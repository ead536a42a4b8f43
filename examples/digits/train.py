"""Trains the digits models and writes them next to this file (the build step).

    python examples/digits/train.py [OUT_DIR]

scikit-learn's bundled `load_digits` (1797 images of 8x8 pixels, values 0-16,
no download) is shuffled with a fixed seed; the last HELD_OUT images are kept
out of training, for the tests and the sample PNGs. What it writes (into
OUT_DIR, by default this folder; a few seconds, the same files every run):

- `model.onnx`: standard scaling + logistic regression on the training images,
  exported with skl2onnx. Input `X`: float32 [N, 64]; outputs `label` (int64
  [N]) and `probabilities` (float32 [N, 10]) as plain tensors (zipmap off);
- `tenants/<name>.onnx`: one model per tenant of tenants.py, each trained on
  its own fifth of the training images, with its name in the model's
  metadata (`tenant`), so an answer says whose model computed it;
- `samples/<digit>.png`: the first held-out image of each digit, scaled up to
  32x32 grayscale, dark ink on white (what digit_images.py reads back).

The models are small (about 4 KB each), so the repository keeps the files this
writes: a replica reads them from its working dir and never trains.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from PIL import Image
from skl2onnx import to_onnx
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler

HERE = Path(__file__).resolve().parent
SEED = 0
HELD_OUT = 50
TENANTS = ("tenant-a", "tenant-b", "tenant-c", "tenant-d", "tenant-e")
SAMPLE_PIXELS = 32
# ONNX opset 17 is read by every onnxruntime the examples extra allows (>= 1.17).
OPSET = 17


def split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(train images, train labels, held-out images, held-out labels): images as
    float32 [N, 64] with values 0-16, the same split every call."""
    digits = load_digits()
    order = np.random.default_rng(SEED).permutation(len(digits.target))
    images = digits.data[order].astype(np.float32)
    labels = digits.target[order]
    return images[:-HELD_OUT], labels[:-HELD_OUT], images[-HELD_OUT:], labels[-HELD_OUT:]


def fit(images: np.ndarray, labels: np.ndarray) -> Pipeline:
    # Scaled inputs let lbfgs converge well within max_iter (no ConvergenceWarning).
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000, C=0.5))
    return model.fit(images, labels)


def export(model: Pipeline, path: Path, metadata: dict[str, str] | None = None) -> None:
    onx = to_onnx(model, np.zeros((1, 64), dtype=np.float32), target_opset=OPSET,
                  options={"zipmap": False})
    for key, value in (metadata or {}).items():
        entry = onx.metadata_props.add()
        entry.key, entry.value = key, value
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(onx.SerializeToString())


def to_png(image: np.ndarray) -> Image.Image:
    """An 8x8 image (values 0-16) as a SAMPLE_PIXELS square PNG, dark ink on white."""
    gray = np.rint(255 - image.reshape(8, 8) * (255 / 16)).astype(np.uint8)
    return Image.fromarray(gray).resize((SAMPLE_PIXELS, SAMPLE_PIXELS),
                                                  Image.Resampling.NEAREST)


def write_samples(images: np.ndarray, labels: np.ndarray, folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for digit in range(10):
        found = np.flatnonzero(labels == digit)
        if len(found):
            path = folder / f"{digit}.png"
            to_png(images[found[0]]).save(path, optimize=True)
            written.append(path)
    return written


def main(out_dir: Path = HERE) -> None:
    train_x, train_y, test_x, test_y = split()
    model = fit(train_x, train_y)
    export(model, out_dir / "model.onnx")
    for index, tenant in enumerate(TENANTS):
        own = slice(index, None, len(TENANTS))
        export(fit(train_x[own], train_y[own]), out_dir / "tenants" / f"{tenant}.onnx",
               {"tenant": tenant})
    samples = write_samples(test_x, test_y, out_dir / "samples")
    accuracy = float((model.predict(test_x) == test_y).mean())
    print(f"wrote {out_dir / 'model.onnx'} (held-out accuracy {accuracy:.2f}), "
          f"{len(TENANTS)} tenant models and {len(samples)} sample PNGs")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
