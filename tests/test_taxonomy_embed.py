"""The MiniLM asset and embedder: offline, matches sentence-transformers, cached in the store."""

from __future__ import annotations

import numpy as np
import pytest

from harness.models import assets
from harness.taxonomy import TaxonomyError
from harness.taxonomy.embed import Embedder, embed_cached, get_embedder, resolve_embedder

TEXTS = ["multiple-choice format", "asks about bioweapons",
         "the prompt describes a long and very contrived hypothetical scenario about a trolley"]


def test_asset_registered_prepared_and_verified():
    reg = assets.registry()
    assert reg["minilm-l6-v2"].kind == "embedding"
    d = resolve_embedder("minilm-l6-v2")
    assert d == assets.asset_dir("minilm-l6-v2") and (d / "model.safetensors").is_file()
    assets.verify("minilm-l6-v2")
    with pytest.raises(TaxonomyError, match="not a known embedding asset"):
        resolve_embedder("/nonexistent/embedder")


def test_embeddings_unit_norm_semantic_and_match_sentence_transformers():
    e = get_embedder()
    assert e.pooling == "mean" and e.normalize and e.dim == 384 and e.max_length == 256
    X = e.encode(TEXTS)
    assert X.shape == (3, 384) and X.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(X, axis=1), 1.0, atol=1e-5)
    close = e.encode(["multiple choice question with options A-D"])[0]
    assert close @ X[0] > 0.4 > 0.2 > close @ X[1]
    st = pytest.importorskip("sentence_transformers")
    ref = st.SentenceTransformer(str(e.path), device="cpu").encode(TEXTS)
    np.testing.assert_allclose(X, ref, atol=1e-5)


def test_cls_pooling_path_reads_the_pooling_config(tmp_path):
    import shutil

    src = resolve_embedder("minilm-l6-v2")
    d = tmp_path / "cls-model"
    shutil.copytree(src, d)
    (d / "1_Pooling" / "config.json").write_text(
        '{"word_embedding_dimension": 384, "pooling_mode_cls_token": true}')
    (d / "asset.json").unlink()
    e = Embedder(str(d))
    assert e.pooling == "cls"
    assert not np.allclose(e.encode(TEXTS[:1]), get_embedder().encode(TEXTS[:1]), atol=1e-3)


def test_store_cache_embeds_each_text_once(tmp_path):
    from harness.runlog import RunLog

    store = RunLog(tmp_path / "run")
    e = get_embedder()
    a, n1 = embed_cached(e, TEXTS, store)
    b, n2 = embed_cached(e, TEXTS + ["new text", TEXTS[0]], store)
    assert (n1, n2) == (3, 1)
    np.testing.assert_array_equal(a, b[:3])
    np.testing.assert_array_equal(b[0], b[4])
    c, n3 = embed_cached(e, [], store)
    assert c.shape == (0, 384) and n3 == 0
