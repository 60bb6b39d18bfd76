"""A trained Transformer against the library's dynamics: the idealisation exact where it must be.

Independent references: on a checkpoint whose biases vanish, whose gains are one and whose
residual stream stays centred, layer normalisation *is* the library's sqrt(d) x/|x|, so the
library's layers with the extracted weights reproduce the real forward pass; the value spectra
against eigenvalues of the raw tensors; the Ginibre fraction of good triples against the paper.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file
from scipy.special import softmax

from hf_models import ROUND_OFF
from meanfield.pretrained import ARCHITECTURES, read_checkpoint
from validation.real_models import (compare_dynamics, fit_isotropic_beta, good_triple_fraction, is_good_triple,
                                    isotropic_layers, library_layers, value_spectra)

DATA = Path(__file__).resolve().parent / "data" / "pretrained"


def centred_checkpoint(tmp_path: Path, family: str) -> Path:
    """The stored checkpoint with zero biases, unit gains, every map into the stream centred, and eps = 1e-300."""
    folder = tmp_path / family
    shutil.copytree(DATA / family, folder)
    architecture = ARCHITECTURES[family]
    config = json.loads((folder / "config.json").read_text())
    config[architecture.sizes["eps"]] = 1e-300
    (folder / "config.json").write_text(json.dumps(config))
    tensors = load_file(str(folder / "model.safetensors"))
    into_stream = [architecture.parts[role] for role in ("output", "outer")] + \
        [architecture.embeddings.get("projection", "-")]
    for name, tensor in tensors.items():
        if name.endswith(".bias"):
            tensors[name] = np.zeros_like(tensor)
        elif tensor.ndim == 1:  # a norm's gain
            tensors[name] = np.ones_like(tensor)
        elif any(name.endswith(part + ".weight") for part in into_stream):
            axis = 0 if architecture.linear_layout == "out_in" else 1
            tensors[name] = tensor - tensor.mean(axis=axis, keepdims=True)
        elif name in (architecture.embeddings["word"], architecture.embeddings["position"]) and family == "gpt2":
            tensors[name] = tensor - tensor.mean(axis=1, keepdims=True)
    save_file(tensors, str(folder / "model.safetensors"))
    return folder


@pytest.mark.parametrize("family", ["albert", "bert", "gpt2"])
def test_where_layer_norm_is_the_library_norm_the_library_layers_are_the_real_ones(tmp_path, family):
    model = read_checkpoint(centred_checkpoint(tmp_path, family))
    ids = np.load(DATA / family / "hidden_states.npz")["ids"]
    real = model.hidden_states(ids).x.values
    assert np.abs(real.mean(axis=-1)).max() < 1e-12  # the stream stays centred: LN(x) = sqrt(d) x / |x|
    np.testing.assert_allclose(library_layers(model, real[0]), real, rtol=0, atol=ROUND_OFF)


def test_on_the_real_checkpoint_the_idealisation_changes_the_states():
    model = read_checkpoint(DATA / "bert")
    ids = np.load(DATA / "bert" / "hidden_states.npz")["ids"]
    ds = compare_dynamics(model, ids, beta=2.0)
    assert json.loads(ds.attrs["settings"]) == {"beta": 2.0, "fitted": False}
    assert list(ds.model.values) == ["real", "weights", "attention only", "isotropic"]
    np.testing.assert_allclose(ds.direction_error.sel(model="real"), 0.0, atol=1e-14)
    assert np.all(ds.direction_error.sel(model="weights").values[1:] > 1e-4)  # biases and centring do matter
    np.testing.assert_allclose(ds.direction_error.sel(time=0), 0.0, atol=1e-14)  # the same input


def test_isotropic_layers_against_a_written_out_softmax_step():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(7, 4))
    frames = isotropic_layers(x, 2.5, 2, causal=True)
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    for layer in range(2):
        logits = 2.5 * u @ u.T
        logits[np.triu_indices(7, 1)] = -np.inf
        step = u + softmax(logits, axis=1) @ u
        u = step / np.linalg.norm(step, axis=1, keepdims=True)
        np.testing.assert_allclose(frames[layer + 1], u, rtol=0, atol=1e-14)


def test_the_isotropic_fit_recovers_the_beta_that_made_the_states():
    x0 = np.random.default_rng(2).normal(size=(40, 8))
    made = isotropic_layers(x0, 3.0, 6)
    assert fit_isotropic_beta(made) == pytest.approx(3.0, rel=1e-4)


def test_value_spectra_are_the_eigenvalues_of_the_raw_value_times_output():
    model = read_checkpoint(DATA / "bert")
    tensors = load_file(str(DATA / "bert" / "model.safetensors"))
    spectra = value_spectra(model)
    heads, k = 3, 4
    for layer in range(model.layers):
        w_v = tensors[f"encoder.layer.{layer}.attention.self.value.weight"].T  # (in, out)
        w_o = tensors[f"encoder.layer.{layer}.attention.output.dense.weight"].T
        for h in range(heads):
            expected = np.linalg.eigvals(w_v[:, h * k:(h + 1) * k] @ w_o[h * k:(h + 1) * k, :])
            found = spectra.eigenvalues.values[layer, h]
            np.testing.assert_allclose(np.sort(np.abs(found)), np.sort(np.abs(expected)), rtol=1e-10, atol=1e-12)
            assert np.all(np.diff(np.abs(found)) <= 1e-12)  # by decreasing modulus


def test_good_triple_definition():
    eye = np.eye(3)
    assert is_good_triple(eye, np.diag([3.0, 1.0, -2.0]))
    assert not is_good_triple(eye, np.diag([-3.0, 1.0, 2.0]))  # leading eigenvalue negative
    assert not is_good_triple(eye, np.diag([3.0, -3.0, 1.0]))  # not simple in modulus
    rotation = np.array([[0.0, -2.0, 0.0], [2.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    assert not is_good_triple(eye, rotation)  # complex pair on top
    assert not is_good_triple(np.diag([-1.0, 1.0, 1.0]), np.diag([3.0, 1.0, 0.5]))  # <Q phi, K phi> < 0


def test_ginibre_good_triples_are_the_papers_fourteen_percent_at_d128():
    """'about 14%' of real Ginibre matrices at d = 128 (The emergence of clusters, sec. 4); within 3 standard errors."""
    fraction, error = good_triple_fraction(128, 400, seed=11)
    assert abs(fraction - 0.14) < 3 * error, (fraction, error)
    assert good_triple_fraction(128, 20, seed=11) == good_triple_fraction(128, 20, seed=11)
