"""The embedding model as the peers of bench/embeddings.py run it (Ray Serve,
BentoML): what servefleet's SentenceEncoder does at run time, with nothing
but onnxruntime, tokenizers and numpy, so it runs in their venvs.

The ONNX file is the one servefleet built and cached for all-MiniLM-L6-v2
(EMBEDDINGS_ONNX), the tokenizer the weights' own (EMBEDDINGS_TOKENIZER):
bench/embeddings.py passes both. Text becomes word-piece ids ([CLS] first,
[SEP] last, no padding, no truncation); a list of id sequences is padded to
the longest with a mask and run once; the graph pools and normalizes.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Sequence

import numpy as np

MODEL = "all-MiniLM-L6-v2"


class Encoder:
    def __init__(self, onnx_path: str = "", tokenizer_path: str = "") -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(tokenizer_path or os.environ["EMBEDDINGS_TOKENIZER"])
        self.tokenizer.no_padding()
        self.tokenizer.no_truncation()
        pad = self.tokenizer.token_to_id("[PAD]")
        if pad is None:
            raise ValueError("the tokenizer has no [PAD] token")
        self.pad_id = pad
        options = ort.SessionOptions()  # as SentenceEncoder's: threads that do not spin
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(onnx_path or os.environ["EMBEDDINGS_ONNX"], options,
                                            providers=["CPUExecutionProvider"])
        self.embed([[self.pad_id] * 256, [self.pad_id]])  # warm, as SentenceEncoder.warm

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        return [list(e.ids) for e in self.tokenizer.encode_batch(list(texts))]

    def embed(self, sequences: Sequence[Sequence[int]]) -> np.ndarray:
        longest = max(len(s) for s in sequences)
        ids = np.full((len(sequences), longest), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(sequences), longest), dtype=np.int64)
        for row, sequence in enumerate(sequences):
            ids[row, :len(sequence)] = sequence
            mask[row, :len(sequence)] = 1
        [vectors] = self.session.run(["embeddings"], {"input_ids": ids, "attention_mask": mask})
        return vectors


def answer(vectors: np.ndarray, tokens: int) -> dict:
    """OpenAI's /v1/embeddings answer, base64 floats (what the openai client asks for)."""
    return {"object": "list", "model": MODEL,
            "data": [{"object": "embedding", "index": i,
                      "embedding": base64.b64encode(v.astype("<f4").tobytes()).decode("ascii")}
                     for i, v in enumerate(vectors)],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
