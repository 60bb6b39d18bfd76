"""The checkpoint reader and the real forward pass, against `transformers`' stored hidden states.

The stored references (tests/data/pretrained/<family>/: a tiny float64 model saved by
`save_pretrained` and `transformers`' hidden states of one prompt) are written by
`make hf-references`; `make test-hf` checks them against `transformers` again.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

import meanfield as mf
from hf_models import ROUND_OFF
from meanfield.pretrained import (ARCHITECTURES, CheckpointError, MultiHeadAttention, read_checkpoint,
                                  write_random_checkpoint)

DATA = Path(__file__).resolve().parent / "data" / "pretrained"
FAMILIES = ("albert", "bert", "gpt2")


def stored(family: str):
    reference = np.load(DATA / family / "hidden_states.npz")
    return read_checkpoint(DATA / family), reference["ids"], reference["hidden_states"]


@pytest.mark.parametrize("family", FAMILIES)
def test_forward_pass_reproduces_transformers_hidden_states_of_every_layer(family):
    model, ids, expected = stored(family)
    ds = model.hidden_states(ids)
    layers = model.layers
    assert expected.shape == (layers + 1,) + ds.x.shape[1:]
    # transformers' last hidden state is the model's output: the final norm of pre-LN models (GPT-2's ln_f)
    np.testing.assert_allclose(ds.x.values[:layers], expected[:layers], rtol=0, atol=ROUND_OFF)
    np.testing.assert_allclose(ds.output.values, expected[layers], rtol=0, atol=ROUND_OFF)
    assert ds.attrs["kind"] == "particles" and ds.attrs["geometry"] == f"R^{model.dimension}"


def test_albert_shares_its_weights_group_by_group(tmp_path):
    model, _, _ = stored("albert")
    assert model.config["num_hidden_groups"] == 2 and model.layers == 4
    # layer l uses group l * groups // layers: layers 0, 1 the first group, 2, 3 the second
    assert model.blocks[0] is model.blocks[1] and model.blocks[2] is model.blocks[3]
    first, second = (model.blocks[i].attention.folded() for i in (0, 2))
    assert not np.allclose(first[0], second[0])
    shared = read_checkpoint(write_random_checkpoint(tmp_path, "albert", layers=5))
    matrices = [block.attention.folded() for block in shared.blocks]
    assert len(matrices) == 5
    assert all(np.array_equal(m[0], matrices[0][0]) and np.array_equal(m[1], matrices[0][1]) for m in matrices)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_attention_sublayer_is_one_euler_step_of_the_library_model(family):
    """The extracted weights in mf.PureAttention on (x, 1) reproduce the real sub-layer to round-off."""
    model, ids, _ = stored(family)
    block = model.blocks[0]
    x = block.attention_input(model.embed(ids))
    extended = np.concatenate([x, np.ones((len(x), 1))], axis=1)
    library = block.attention.as_pure_attention()
    step = extended + 1.0 * library.velocity(extended)
    # the independent reference: softmax attention written out head by head from the raw tensors
    attention = block.attention
    expected = np.zeros_like(x)
    for h in range(attention.heads):
        q = x @ attention.query[h] + attention.query_bias[h]
        k = x @ attention.key[h] + attention.key_bias[h]
        v = x @ attention.value[h] + attention.value_bias[h]
        for i in range(len(x)):
            seen = i + 1 if attention.causal else len(x)
            logits = k[:seen] @ q[i] / math.sqrt(attention.head_dimension)
            weights = np.exp(logits - logits.max())
            expected[i] += (weights / weights.sum()) @ v[:seen] @ attention.output[h]
    expected += attention.output_bias
    np.testing.assert_allclose(step[:, :-1] - x, expected, rtol=0, atol=1e-12)
    np.testing.assert_allclose(step[:, -1], 1.0, rtol=0, atol=1e-14)
    np.testing.assert_allclose(attention(x), expected, rtol=0, atol=1e-12)


def test_folded_matrices_are_the_papers_without_biases():
    model, ids, _ = stored("bert")
    attention = model.blocks[1].attention
    bilinear, value = attention.folded()
    x = model.embed(ids)
    h = 2
    logits = (x @ attention.query[h]) @ (x @ attention.key[h]).T / math.sqrt(attention.head_dimension)
    np.testing.assert_allclose(x @ bilinear[h] @ x.T, logits, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose((value[h] @ x.T).T, x @ attention.value[h] @ attention.output[h], rtol=1e-12, atol=1e-12)
    unbiased = MultiHeadAttention(attention.query, 0 * attention.query_bias, attention.key, 0 * attention.key_bias,
                                  attention.value, 0 * attention.value_bias, attention.output,
                                  0 * attention.output_bias)
    # the papers' model: PureAttention with Q^T K = B_h (key = I) and the folded values
    papers = mf.PureAttention(query=np.swapaxes(bilinear, 1, 2), value=value, beta=1.0)
    np.testing.assert_allclose(papers.velocity(x), unbiased(x), rtol=1e-12, atol=1e-12)


def test_causal_pure_attention_ignores_later_tokens():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(6, 3))
    model = mf.PureAttention(query=rng.normal(size=(3, 3)), value=rng.normal(size=(3, 3)), beta=0.7, mask="causal")
    moved = x.copy()
    moved[4:] += 5.0
    np.testing.assert_array_equal(model.velocity(x)[:4], model.velocity(moved)[:4])
    # the first token sees only itself: its velocity is V x_0
    np.testing.assert_allclose(model.velocity(x)[0], model.value[0] @ x[0], rtol=1e-14)
    attention = model.attention_matrix(x)[0]
    assert np.all(np.triu(attention, 1) == 0) and np.allclose(attention.sum(axis=1), 1)
    with pytest.raises(ValueError, match="mask"):
        mf.PureAttention(beta=math.inf, mask="causal")
    with pytest.raises(ValueError, match="mask must be"):
        mf.PureAttention(mask="future")


@pytest.mark.parametrize("family", FAMILIES)
def test_written_checkpoints_are_read_back_and_repeat_by_seed(tmp_path, family):
    first = write_random_checkpoint(tmp_path / "a", family, hidden=16, heads=2, layers=3, seed=7)
    again = write_random_checkpoint(tmp_path / "b", family, hidden=16, heads=2, layers=3, seed=7)
    assert (first / "model.safetensors").read_bytes() == (again / "model.safetensors").read_bytes()
    model = read_checkpoint(first)
    assert (model.dimension, model.layers, model.blocks[0].attention.heads) == (16, 3, 2)
    ds = model.hidden_states(np.arange(10))
    assert ds.x.shape == (4, 10, 16) and np.all(np.isfinite(ds.x))


def _broken(tmp_path: Path, family: str = "bert") -> Path:
    folder = tmp_path / family
    shutil.copytree(DATA / family, folder)
    return folder


def test_missing_or_malformed_config_is_one_clear_line(tmp_path):
    folder = _broken(tmp_path)
    (folder / "config.json").write_text("{ not json")
    with pytest.raises(CheckpointError, match=r"config\.json: not valid JSON"):
        read_checkpoint(folder)
    (folder / "config.json").unlink()
    with pytest.raises(CheckpointError, match=r"config\.json: no such file"):
        read_checkpoint(folder)
    with pytest.raises(CheckpointError, match="not a folder"):
        read_checkpoint(tmp_path / "nowhere")


def test_unknown_architecture_and_unmapped_switches_are_refused(tmp_path):
    folder = _broken(tmp_path)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "llama"}))
    with pytest.raises(CheckpointError, match=r"model_type = 'llama' is not one of \['albert', 'bert', 'gpt2'\]"):
        read_checkpoint(folder)
    (folder / "config.json").write_text(json.dumps({**config, "position_embedding_type": "relative_key"}))
    with pytest.raises(CheckpointError, match="position_embedding_type = 'relative_key' is not mapped"):
        read_checkpoint(folder)
    (folder / "config.json").write_text(json.dumps({**config, "hidden_act": "mish"}))
    with pytest.raises(CheckpointError, match="hidden_act = 'mish' is not one of"):
        read_checkpoint(folder)


def test_wrong_shape_or_missing_tensor_names_the_file_and_the_key(tmp_path):
    from safetensors.numpy import load_file, save_file

    folder = _broken(tmp_path)
    tensors = load_file(str(folder / "model.safetensors"))
    name = "encoder.layer.1.attention.self.key.weight"
    save_file({**tensors, name: tensors[name][:, :6].copy()}, str(folder / "model.safetensors"))
    with pytest.raises(CheckpointError, match=rf"model\.safetensors: tensor '{name}' \(block 1's key\) has shape "
                                              r"\(12, 6\), expected \(12, 12\)"):
        read_checkpoint(folder)
    broken = tensors[name].copy()
    broken[3, 4] = np.nan
    save_file({**tensors, name: broken}, str(folder / "model.safetensors"))
    with pytest.raises(CheckpointError, match=rf"tensor '{name}' \(block 1's key\) holds NaN or infinite entries"):
        read_checkpoint(folder)
    save_file({k: v for k, v in tensors.items() if k != name}, str(folder / "model.safetensors"))
    with pytest.raises(CheckpointError, match=rf"model\.safetensors: no tensor '{name}'"):
        read_checkpoint(folder)
    (folder / "model.safetensors").write_bytes(b"\x10\x00garbage")
    with pytest.raises(CheckpointError, match="not a readable safetensors file"):
        read_checkpoint(folder)


def test_a_checkpoint_in_another_format_is_refused_with_the_remedy(tmp_path):
    folder = _broken(tmp_path)
    (folder / "model.safetensors").rename(folder / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match=r"pytorch_model\.bin: a checkpoint in another format.*safetensors"):
        read_checkpoint(folder)


def test_prefixed_and_tensorflow_named_tensors_are_read(tmp_path):
    """Hub checkpoints saved from task models prefix 'bert.'; converted TensorFlow ones name gains 'gamma'."""
    from safetensors.numpy import load_file, save_file

    folder = _broken(tmp_path)
    tensors = load_file(str(folder / "model.safetensors"))
    renamed = {"bert." + k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
               for k, v in tensors.items()}
    save_file(renamed, str(folder / "model.safetensors"))
    model, ids, expected = read_checkpoint(folder), *stored("bert")[1:]
    np.testing.assert_allclose(model.hidden_states(ids).x.values, expected, rtol=0, atol=ROUND_OFF)


def test_bad_prompts_are_refused():
    model, _, _ = stored("gpt2")
    with pytest.raises(ValueError, match=r"ids must lie in \[0, 30\)"):
        model.hidden_states([1, 2, 30])
    with pytest.raises(ValueError, match="more than the 16 positions"):
        model.hidden_states(np.zeros(17, dtype=int))
    with pytest.raises(ValueError, match="either ids"):
        model.hidden_states()
    with pytest.raises(ValueError, match=r"embeddings must be finite with shape \(n, 12\)"):
        model.hidden_states(embeddings=np.ones((3, 5)))


def test_the_mapping_table_names_every_role_a_block_needs():
    for architecture in ARCHITECTURES.values():
        roles = set(architecture.parts)
        attention = {"qkv"} if architecture.fused_qkv else {"query", "key", "value"}
        assert roles == attention | {"output", "attention_norm", "inner", "outer", "feed_forward_norm"}
