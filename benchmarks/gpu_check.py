"""The array API path on a GPU: same numbers as numpy, and the paper's phase diagram timed.

Needs PyTorch (or CuPy) with a GPU; run on a machine that has one:

    python benchmarks/gpu_check.py [--library torch|cupy] [--realisations 2048]

1. SA, USA and general Q/K/V runs (100 layer steps) from torch/CuPy arrays on the GPU agree
   with the numpy run to 1e-12.
2. The phase diagram of ``examples/phase_diagram.toml`` (n = 32, d = 2, 90 betas,
   step 0.1 to t = 30), the observable each step: betas one after another (all
   realisations of a beta in one batch), then all betas in one batch with a beta per
   system (``observe_particles(..., betas=...)``), which must give the same probabilities.
3. The same diagram through ``meanfield sweep --device`` (one worker, ``batch`` = all
   realisations, so one task per row of betas), wall time including the Dask cluster's start.
4. Pure attention in R^3 (``PureAttention``, rescaled, two heads): RK4 and the layer scheme
   from GPU arrays agree with numpy to 1e-12; the issue's benchmark size (n = 1000 to t = 10,
   fixed step 0.1) timed per system-step on the GPU, one system and a batch of 32, against numpy's one.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from array_api_compat import array_namespace

import meanfield as mf
from meanfield.engines.kernels import to_numpy


def device_array(x: np.ndarray, library: str):
    if library == "torch":
        import torch
        return torch.asarray(x, dtype=torch.float64, device="cuda")
    import cupy
    return cupy.asarray(x)


def synchronize(library: str) -> None:
    if library == "torch":
        import torch
        torch.cuda.synchronize()
    else:
        import cupy
        cupy.cuda.Device().synchronize()


def agreement(library: str) -> None:
    rng = np.random.default_rng(0)
    general = dict(query=rng.normal(size=(2, 3, 3)) / 2, key=rng.normal(size=(2, 3, 3)) / 2,
                   value=rng.normal(size=(2, 3, 3)) / 2)
    for name, model in (("SA", mf.SelfAttention(4.0)), ("USA", mf.SelfAttention(2.0, normalized=False)),
                        ("noisy SA", mf.SelfAttention(3.0, diffusion=0.1)),
                        ("general", mf.SelfAttention(1.5, **general))):
        x0 = mf.sample_uniform(32, 3, 1, batch=64)
        host = mf.simulate_particles(model, x0, [0.0, 1.0], method="layer", dt=0.01, rng=3, kernel="numpy")
        gpu = mf.simulate_particles(model, device_array(x0, library), [0.0, 1.0], method="layer", dt=0.01, rng=3)
        error = np.abs(gpu.x.values - host.x.values).max()
        print(f"{name:8} {library} vs numpy after 100 steps: max |dx| = {error:.2e}  ({gpu.attrs['settings']})"
              if error > 1e-12 else f"{name:8} {library} vs numpy after 100 steps: max |dx| = {error:.2e}")


def phase_diagram(library: str, realisations: int) -> None:
    times = np.linspace(0.0, 30.0, 301)
    betas = np.linspace(0.1, 9.0, 90)
    tokens = mf.sample_uniform(32, 2, 0, batch=realisations)
    x0 = device_array(tokens, library)
    xp = array_namespace(x0)

    def observe(x):
        inner = xp.reshape(xp.vecdot(x[:, 0, :], x[:, 1, :]), (-1, realisations))
        return xp.mean(xp.astype(inner >= 1.0 - 1e-3, xp.float64), axis=1)

    synchronize(library)
    start = time.perf_counter()
    one_by_one = [mf.observe_particles(mf.SelfAttention(float(beta)), x0, times, observe, method="euler", dt=0.1)
                  for beta in betas]
    synchronize(library)
    seconds = time.perf_counter() - start
    final = np.array([float(to_numpy(p[-1])[0]) for p in one_by_one])
    print(f"phase diagram 90 betas x {realisations} systems, n=32 d=2, 300 steps on {library}, betas one after "
          f"another: {seconds:.1f} s; P(clustered at t=30) for beta = 0.1, 4.5, 9: "
          f"{final[0]:.3f}, {final[44]:.3f}, {final[-1]:.3f}")

    rows = device_array(np.concatenate([tokens] * len(betas)), library)
    synchronize(library)
    start = time.perf_counter()
    batched = mf.observe_particles(mf.SelfAttention(1.0), rows, times, observe, method="euler", dt=0.1,
                                   betas=np.repeat(betas, realisations))
    synchronize(library)
    seconds = time.perf_counter() - start
    # Same systems, same steps: only an inner product within round-off of the threshold could differ.
    difference = np.abs(to_numpy(batched[-1]) - final).max()
    print(f"  all betas in one batch (a beta per system): {seconds:.1f} s; max |dP| vs one by one at t=30: "
          f"{difference:.2e} (1 system in {realisations} = {1 / realisations:.1e})")


def sweep(library: str, realisations: int) -> None:
    import tempfile
    from pathlib import Path

    from validation.app.config import tomllib
    from validation.app.sweep import run_sweep
    from validation.app.sweep_config import check_sweep_config

    raw = tomllib.loads((Path(__file__).parents[1] / "examples" / "phase_diagram.toml").read_text())
    with tempfile.TemporaryDirectory() as folder:
        raw["output"] = folder
        raw["sweep"].update(realisations=realisations, batch=realisations,
                            device="torch:cuda" if library == "torch" else "cupy")
        start = time.perf_counter()
        ds = run_sweep(check_sweep_config(raw), workers=1, progress=False)
        seconds = time.perf_counter() - start
    final = ds.clustered_probability.isel(time=-1).values.ravel()
    print(f"meanfield sweep --device {raw['sweep']['device']} (1 worker, one task per row of betas): "
          f"{seconds:.1f} s wall with the cluster's start; P at t=30 for beta = 0.1, 4.5, 9: "
          f"{final[0]:.3f}, {final[44]:.3f}, {final[-1]:.3f}")


def pure_attention(library: str) -> None:
    rng = np.random.default_rng(1)
    model = mf.PureAttention(beta=1.0, query=np.eye(3) + 0.2 * rng.normal(size=(2, 3, 3)),
                             value=np.diag([1.0, 0.5, -0.5]), rescaled=True)
    x0 = rng.uniform(-1.0, 1.0, (32, 64, 3))
    for method in ("rk4", "layer"):
        host = mf.simulate_particles(model, x0, [0.0, 2.0], method=method, dt=0.02)
        gpu = mf.simulate_particles(model, device_array(x0, library), [0.0, 2.0], method=method, dt=0.02)
        print(f"PureAttention {method:5} {library} vs numpy after 100 steps: "
              f"max |dz| = {np.abs(gpu.x.values - host.x.values).max():.2e}")
    def per_system_step(x, systems: int) -> float:
        synchronize(library)
        start = time.perf_counter()
        mf.observe_particles(model, x, [0.0, 10.0], lambda y: None, method="rk4", dt=0.1)
        synchronize(library)
        return (time.perf_counter() - start) / (100 * systems)

    host = per_system_step(rng.uniform(-1.0, 1.0, (1, 1000, 3)), 1)  # numpy's cost per system-step is flat in the batch
    for systems in (1, 32):
        seconds = per_system_step(device_array(rng.uniform(-1.0, 1.0, (systems, 1000, 3)), library), systems)
        print(f"PureAttention n=1000 d=3 RK4, {systems} system(s): {seconds * 1e3:.3f} ms per system-step "
              f"on {library}, {host * 1e3:.3f} ms on numpy ({host / seconds:.1f}x)")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--library", choices=["torch", "cupy"], default="torch")
    parser.add_argument("--realisations", type=int, default=2048)
    args = parser.parse_args(argv)
    agreement(args.library)
    phase_diagram(args.library, args.realisations)
    sweep(args.library, args.realisations)
    pure_attention(args.library)


if __name__ == "__main__":
    main(sys.argv[1:])
