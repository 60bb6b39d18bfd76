"""Write the stored references of the checkpoint reader: tiny models and their hidden states from `transformers`.

Run by `make hf-references` (needs the `hf` extra: CPU torch and transformers). For each family it
builds a tiny model from a config with random weights (perturbed, so that every bias and norm is
exercised), in float64, saves it with `save_pretrained` into tests/data/pretrained/<family>/, and
stores `transformers`' own hidden states of one prompt there (hidden_states.npz). The default test
suite checks the library's forward pass against these files; `make test-hf` checks them against
`transformers` again.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from hf_models import FAMILIES, build_model, hidden_states_of  # noqa: E402


def main() -> None:
    for family in FAMILIES:
        folder = ROOT / "tests" / "data" / "pretrained" / family
        model, ids = build_model(family, seed=0)
        model.save_pretrained(folder)
        np.savez(folder / "hidden_states.npz", ids=ids, hidden_states=hidden_states_of(model, ids))
        print(f"wrote {folder}")


if __name__ == "__main__":
    main()
