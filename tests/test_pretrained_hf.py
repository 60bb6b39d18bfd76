"""The checkpoint reader against Hugging Face `transformers` itself (the `hf` group: `make test-hf`).

Tiny models built from a config with random weights (no download), saved with `save_pretrained`,
in float64: the library's reader and forward pass reproduce `transformers`' hidden states of
every layer to round-off (ROUND_OFF), and the stored references of the default suite are
`transformers`' own.
"""

from __future__ import annotations

import numpy as np
import pytest

from meanfield.pretrained import read_checkpoint, write_random_checkpoint

pytest.importorskip("torch", reason="the hf group needs CPU torch: make test-hf installs it")
transformers = pytest.importorskip("transformers", reason="the hf group needs transformers: make test-hf installs it")

from hf_models import FAMILIES, PROMPT, ROUND_OFF, build_model, hidden_states_of  # noqa: E402

pytestmark = pytest.mark.hf

DATA = __import__("pathlib").Path(__file__).resolve().parent / "data" / "pretrained"


def _compare(model, ours, layers):
    expected = hidden_states_of(model, PROMPT)
    np.testing.assert_allclose(ours.x.values[:layers], expected[:layers], rtol=0, atol=ROUND_OFF)
    np.testing.assert_allclose(ours.output.values, expected[layers], rtol=0, atol=ROUND_OFF)


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_layer_equals_transformers(tmp_path, family, seed):
    model, ids = build_model(family, seed)
    model.save_pretrained(tmp_path)
    ours = read_checkpoint(tmp_path)
    _compare(model, ours.hidden_states(ids), ours.layers)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_stored_references_are_transformers_own(family):
    model = getattr(transformers, FAMILIES[family][1]).from_pretrained(DATA / family).double().eval()
    stored = np.load(DATA / family / "hidden_states.npz")
    np.testing.assert_array_equal(stored["ids"], PROMPT)
    np.testing.assert_allclose(hidden_states_of(model, PROMPT), stored["hidden_states"], rtol=0, atol=1e-12)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_written_random_checkpoints_are_the_real_format(tmp_path, family):
    """transformers reads what write_random_checkpoint writes and computes the same hidden states."""
    folder = write_random_checkpoint(tmp_path, family, hidden=16, heads=4, layers=2, vocabulary=32, positions=16,
                                     dtype="float64")
    model = getattr(transformers, FAMILIES[family][1]).from_pretrained(folder).double().eval()
    ours = read_checkpoint(folder)
    _compare(model, ours.hidden_states(PROMPT), ours.layers)
