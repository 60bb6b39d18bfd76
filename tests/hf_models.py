"""Tiny Hugging Face models with random weights for the reader's tests (needs torch and transformers)."""

from __future__ import annotations

import numpy as np

#: Each family's tiny configuration (heads of width 4; ALBERT with two groups of shared layers).
FAMILIES = {
    "albert": ("AlbertConfig", "AlbertModel", dict(embedding_size=8, hidden_size=12, num_attention_heads=3,
                                                    intermediate_size=20, num_hidden_layers=4, num_hidden_groups=2,
                                                    vocab_size=30, max_position_embeddings=16)),
    "bert": ("BertConfig", "BertModel", dict(hidden_size=12, num_attention_heads=3, intermediate_size=20,
                                            num_hidden_layers=3, vocab_size=30, max_position_embeddings=16)),
    "gpt2": ("GPT2Config", "GPT2Model", dict(n_embd=12, n_head=3, n_layer=3, vocab_size=30, n_positions=16,
                                            bos_token_id=0, eos_token_id=0)),
}

#: float64 round-off of the hidden states (entries of size a few, sums of at most 80 products,
#: and another summation order in another BLAS): measured 2e-15 here.
ROUND_OFF = 1e-12

#: The prompt whose hidden states are compared.
PROMPT = np.array([1, 5, 7, 3, 9, 2, 11, 4, 27, 14])


def build_model(family: str, seed: int):
    """A float64 model of ``family`` in eval mode, every parameter perturbed by N(0, 0.1^2); and the prompt."""
    import torch
    import transformers

    config_class, model_class, sizes = FAMILIES[family]
    torch.manual_seed(seed)
    model = getattr(transformers, model_class)(getattr(transformers, config_class)(**sizes)).double().eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    return model, PROMPT


def hidden_states_of(model, ids: np.ndarray) -> np.ndarray:
    """``transformers``' hidden states of one prompt, shape (layers + 1, n, d)."""
    import torch

    with torch.no_grad():
        out = model(torch.tensor(ids)[None], output_hidden_states=True)
    return np.stack([h[0].numpy() for h in out.hidden_states])
