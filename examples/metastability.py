"""Metastability on the circle and on the sphere, from Python in one call each.

Runs the two example configs (SA, beta = 9, perturbed uniform density), writes their
datasets and figures, and prints how many clusters the PDE shows at a few times next to
the fastest-growing mode of the dispersion relation (about sqrt(2 beta) clusters first).

    python examples/metastability.py
"""

from pathlib import Path

import meanfield as mf
from validation import cluster_statistics, growth_rate
from validation.config import load_config
from validation.experiment import run_experiment
from validation.experiment_figures import experiment_figures

HERE = Path(__file__).parent

for name, d in (("metastability_circle", 2), ("metastability_sphere", 3)):
    config = load_config(HERE / f"{name}.toml")
    ds = run_experiment(config)
    experiment_figures(ds, Path(config["output"]), config["geometry"])
    model = mf.SelfAttention(**config["model"])
    fastest = max(range(1, 20), key=lambda l: growth_rate(model, l, d))
    counts = {float(t): cluster_statistics(ds, k).count for k, t in enumerate(ds.time.values)
              if k % max(1, ds.sizes["time"] // 5) == 0}
    print(f"{name}: fastest-growing degree {fastest}; clusters over time {counts}; "
          f"output in {config['output']}")
