"""An embedding model for tests of what happens while a batch runs: each run
of `embed` notes its inputs in `marks/runs` (one line a run, each input's
text) and then holds while the file `marks/hold` exists, so a test can
keep the model busy while requests queue behind it, let their clients go,
and see afterwards which inputs ever reached the model.

A text's token ids are its characters' codes, so a run's line is its texts.
"""

from __future__ import annotations

import os
import time

import numpy as np


class HeldEncoder:
    dimensions = 4
    max_tokens = 64
    vocab_size = 128

    def __init__(self, marks: str) -> None:
        self.marks = marks

    def tokenize(self, texts: list[str]) -> list[list[int]]:
        return [[ord(c) % self.vocab_size for c in text] for text in texts]

    def truncate(self, ids: list[int]) -> list[int]:
        return ids[:self.max_tokens]

    def warm(self) -> None:
        pass  # nothing to load; not noted, not held

    def embed(self, sequences: list[list[int]]) -> np.ndarray:
        with open(os.path.join(self.marks, "runs"), "a") as runs:
            runs.write(" ".join("".join(map(chr, s)) for s in sequences) + "\n")
        deadline = time.monotonic() + 60
        while os.path.exists(os.path.join(self.marks, "hold")) and time.monotonic() < deadline:
            time.sleep(0.01)
        vectors = np.ones((len(sequences), self.dimensions), dtype=np.float32)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
