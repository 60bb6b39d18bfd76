"""The ``meanfield`` command line.

Each command imports its own modules (solvers, figures, the sweep) when it runs, not here:
the sweep's Dask workers are spawned processes that re-import the console script's main
module, and importing every command here would add the solvers and matplotlib to each
worker's start-up.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import traceback
import warnings
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import numpy as np

import meanfield as mf
from meanfield.errors import StepSizeCollapse
from meanfield.records import package_version

from .errors import SweepTaskError, Terminated
from .files import check_output_folder, locked_output


def _demo(args: argparse.Namespace) -> int:
    """A short particle run on the circle: clusters form, energy rises."""
    from validation.figures import subplots  # this command's own module (module docstring)

    check_output_folder(args.output, "--output")  # before computing: a bad folder must not cost the run
    model = mf.SelfAttention(args.beta)
    x0 = mf.sample_uniform(args.n, 2, rng=args.seed)
    times = np.linspace(0.0, args.t_end, 61)
    ds = mf.simulate_particles(model, x0, times, method="rk4", dt=0.01, progress=False if args.quiet else None,
                               observables=("energy",))
    theta = mf.circle_angles(ds.x.values)
    args.output.mkdir(parents=True, exist_ok=True)
    fig, (ax_paths, ax_energy) = subplots(1, 2, figsize=(10, 4))
    ax_paths.plot(times, theta, ".", color="C0", markersize=1.5)
    ax_paths.set(xlabel="time", ylabel="angle", title=f"SA particles on the circle, beta={args.beta}, n={args.n}")
    ax_energy.plot(times, ds.energy.values)
    ax_energy.set(xlabel="time", ylabel="energy E", title="interaction energy (non-decreasing)")
    figure = args.output / "particles_demo.png"
    fig.savefig(figure, dpi=120)
    print(f"{'time':>6} {'energy':>10} {'order |m|':>10}")
    for k in range(0, times.size, 10):
        m = np.linalg.norm(ds.x.values[k].mean(axis=0))
        print(f"{times[k]:6.2f} {ds.energy.values[k]:10.5f} {m:10.4f}")
    print(f"figure written to {figure}")
    return 0


def _int_list(text: str) -> list[int]:
    """``"64,128,512"``, or ``"64..16384"`` for the powers of two between them (doubling from the first)."""
    try:
        if ".." in text:
            first, last = (int(item) for item in text.split(".."))
            if first < 1 or last < first:
                raise ValueError
            return [first * 2**k for k in range(int(np.log2(last / first) + 1e-9) + 1)]
        return [int(item) for item in text.split(",") if item]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers or a doubling range FIRST..LAST, "
                                         f"got {text!r}") from None


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _validate(args: argparse.Namespace) -> int:
    """The main job: mean-field convergence on the circle and the sphere, with report and figures."""
    from .validate import default_specs, run_validation  # this command's own module (module docstring)

    check_output_folder(args.output, "--output")
    specs = default_specs(beta_circle=args.beta_circle, beta_sphere=args.beta_sphere,
                          diffusion_sphere=args.diffusion_sphere, sizes=args.sizes, seeds=args.seeds)
    if args.geometry != "both":
        specs = {args.geometry: specs[args.geometry]}
    rows = run_validation(specs, args.output, progress=False if args.quiet else None,
                          echo=(lambda _: None) if args.quiet else print)
    outside = [row for row in rows if not row["contains"]]
    for row in outside if not args.quiet else []:
        print(f"note: at t={row['time']:g} on the {row['geometry']} the interval [{row['low']:.3f}, "
              f"{row['high']:.3f}] excludes -1/2 (see the report)")
    return 1 if args.strict and outside else 0


def _run(args: argparse.Namespace) -> int:
    """An experiment from a TOML config: dataset, figures, animation; resumable."""
    # this command's own modules (module docstring)
    from solvers import UnderResolvedWarning

    from .experiment import prepare, run_experiment, write_report
    from .experiment_figures import experiment_figures

    run = prepare(args.config)
    config = run.config
    output = Path(config.output)
    # The folder stays locked until its last file is written: a second run is refused until then.
    with locked_output(output, "meanfield run"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", UnderResolvedWarning)
            try:
                ds = run_experiment(run, resume=args.resume, progress=False if args.quiet else None, locked=True)
            except KeyboardInterrupt:
                args.kept = (f"the checkpoints written so far are kept in {config.output}/checkpoint: "
                             "continue with --resume")
                raise
        paths = experiment_figures(ds, output, config.geometry, animation=not args.no_animation,
                                   progress=False if args.quiet else None)
        untrustworthy = None if ds.attrs["trustworthy"] else (
            f"stopped before the last output time: {ds.attrs['stopped']}" if ds.attrs["stopped"] else
            str(caught[0].message) if caught else "the solver's diagnostics say so")
        write_report(ds, config, output, paths, untrustworthy)
    if not args.quiet:
        print(f"dataset: {output / 'dataset.nc'} ({ds.sizes['time']} output times, {ds.attrs['wall_time']:.1f} s)")
        print("figures: " + ", ".join(str(p) for p in paths))
    if untrustworthy:
        print(f"UNTRUSTWORTHY: {untrustworthy}", file=sys.stderr)
        return 3
    return 0


def _sweep(args: argparse.Namespace) -> int:
    """A parameter grid from a TOML config, run on Dask; resumable."""
    # this command's own modules (module docstring)
    from .sweep import PARTS, run_sweep
    from .sweep_config import check_device, load_sweep_config

    sweep = load_sweep_config(args.config)
    if args.device is not None:
        sweep = replace(sweep, settings=replace(sweep.settings, device=check_device(args.device, "--device")))
    try:
        ds = run_sweep(sweep, scheduler=args.scheduler, workers=args.workers, resume=args.resume,
                       progress=False if args.quiet else None)
    except KeyboardInterrupt:
        kept = len(list((sweep.output / PARTS).glob("*.npz")))
        args.kept = f"{kept} finished tasks are kept in {sweep.output / PARTS}: continue with --resume"
        raise
    path = sweep.output / sweep.settings.file
    grid = " x ".join(f"{name} ({size})" for name, size in zip(sweep.grid, sweep.shape))
    if not args.quiet:
        print(f"sweep: {path} over {grid}; {ds.attrs['tasks_computed']} of {ds.attrs['tasks']} tasks computed "
              f"in {ds.attrs['wall_time']:.1f} s")
    if "trustworthy" in ds and not bool(ds.trustworthy.all()):
        bad = ds.trustworthy.where(ds.trustworthy == 0, drop=True).stack(point=list(sweep.grid)).point.values
        print(f"UNTRUSTWORTHY (under-resolved) points: {', '.join(map(str, bad))}", file=sys.stderr)
        return 3
    return 0


def _stationary(args: argparse.Namespace) -> int:
    """A bifurcation diagram from a TOML config."""
    from .stationary import load_stationary_config, run_stationary, summary  # this command's own module

    config = load_stationary_config(args.config)
    diagram, paths = run_stationary(config, progress=False if args.quiet else None)
    for line in summary(diagram):
        print(line)
    print("written: " + ", ".join(str(p) for p in paths))
    return 0


class DefaultsOnceFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Defaults shown once: not where the help already says it, nor for flags and unset options."""

    def _get_help_string(self, action):
        if "default" in (action.help or "") or action.default in (None, False, argparse.SUPPRESS):
            return action.help
        return super()._get_help_string(action)


def _config_command(commands, name: str, handler, *, help: str, description: str,
                    resume: str) -> argparse.ArgumentParser:
    """A subcommand that reads a TOML config and can resume: ``name CONFIG [--resume] [--quiet]``."""
    command = commands.add_parser(name, help=help, description=description, formatter_class=DefaultsOnceFormatter)
    command.add_argument("config", type=Path)
    command.add_argument("--resume", action="store_true", help=resume)
    command.add_argument("--quiet", action="store_true", help="no progress bars")
    command.set_defaults(handler=handler)
    return command


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="meanfield", formatter_class=DefaultsOnceFormatter,
        description="Mean-field PDEs and particle systems of self-attention: the default validation run, "
                    "experiments and parameter sweeps from TOML configs.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    parser.set_defaults(kept=None)  # what an interrupted command leaves behind, set as it runs
    commands = parser.add_subparsers(dest="command", required=True)
    validate = commands.add_parser(
        "validate", formatter_class=DefaultsOnceFormatter, help="default mean-field validation run (report, NetCDF, figures)",
        description="Particles against the PDE on the circle (SA, D = 0) and the sphere (USA, small D): "
                    "distances at several times, fitted convergence rate in n with bootstrap intervals. "
                    "With --strict the exit status is 1 when -1/2 lies outside some interval.")
    validate.add_argument("--geometry", choices=["circle", "sphere", "both"], default="both",
                          help="which of the two studies to run")
    validate.add_argument("--beta-circle", type=float, default=5.0, help="SA inverse temperature on the circle")
    validate.add_argument("--beta-sphere", type=float, default=1.0, help="USA inverse temperature on S^2")
    validate.add_argument("--diffusion-sphere", type=float, default=0.05, help="diffusion D on S^2")
    validate.add_argument("--sizes", type=_int_list, default=None,
                          help="particle counts, comma-separated (64,256,1024) or doubling (64..16384); "
                               "default 64..16384 on the circle, 64..8192 on the sphere")
    validate.add_argument("--seeds", type=_positive_int, default=None,
                          help="samples per particle count (default: 112 on the circle, 96 on the sphere)")
    validate.add_argument("--output", type=Path, default=Path("output/validate"),
                          help="folder for the report, the datasets and the figures")
    validate.add_argument("--quiet", action="store_true", help="no progress bars")
    validate.add_argument("--strict", action="store_true", help="exit 1 when an interval excludes -1/2")
    validate.set_defaults(handler=_validate)
    run = _config_command(
        commands, "run", _run, help="an experiment from a TOML config (see examples/)",
        description="Runs the experiment a TOML file describes and writes dataset.nc, figures and an "
                    "animation to its output folder. Exit status: 0 done, 2 bad config, 3 done but "
                    "under-resolved (untrustworthy from the time the report gives).",
        resume="continue from the last checkpoint")
    run.add_argument("--no-animation", action="store_true", help="skip the animation (often the longest part)")
    sweep = _config_command(
        commands, "sweep", _sweep, help="a parameter grid on Dask (see examples/phase_diagram.toml)",
        description="Runs every point of the grid a TOML file describes (particle ensembles or PDE runs) on "
                    "Dask and writes one NetCDF/Zarr dataset with the parameters as coordinates. Finished "
                    "tasks are kept in OUTPUT/parts; --resume skips them. Exit status: 0 done, 1 a task failed "
                    "(finished tasks kept), 2 bad config, 3 done but some PDE points under-resolved.",
        resume="skip the tasks an earlier run finished")
    sweep.add_argument("--scheduler", help="address of a running Dask scheduler (default: a local cluster)")
    sweep.add_argument("--workers", type=_positive_int, default=None,
                       help="worker processes of the local cluster (default: one per core)")
    sweep.add_argument("--device", default=None,
                       help="array library and device of the particles, e.g. torch:cuda, cupy, jax "
                            "(default: sweep.device, numpy)")
    stationary = commands.add_parser(
        "stationary", formatter_class=DefaultsOnceFormatter, help="a bifurcation diagram of stationary states (TOML config)",
        description="Follows the stationary states of the mean-field equation with diffusion on the circle from "
                    "the uniform state through its bifurcation points over a range of diffusion or beta, with "
                    "their stability, and writes bifurcation.nc and bifurcation.png to the output folder "
                    "(config: validation/app/stationary.py's docstring, examples/bifurcation.toml). Exit "
                    "status: 0 done, 2 bad config.")
    stationary.add_argument("config", type=Path)
    stationary.add_argument("--quiet", action="store_true", help="no progress bars")
    stationary.set_defaults(handler=_stationary)
    demo = commands.add_parser("demo", help="short particle demo on the circle", formatter_class=DefaultsOnceFormatter,
                               description="SA particles on the circle cluster while their energy rises.")
    demo.add_argument("--beta", type=float, default=9.0, help="inverse temperature")
    demo.add_argument("--n", type=_positive_int, default=256, help="number of particles")
    demo.add_argument("--t-end", type=float, default=15.0, help="final time")
    demo.add_argument("--seed", type=int, default=0, help="seed of the initial particles")
    demo.add_argument("--output", type=Path, default=Path("output"), help="folder of the figure")
    demo.add_argument("--quiet", action="store_true", help="no progress bar")
    demo.set_defaults(handler=_demo)
    return parser


def _terminate(signum, frame) -> None:
    raise Terminated()


@contextmanager
def _sigterm_as_interrupt():
    """In the main thread, SIGTERM raises :class:`Terminated`: runs and sweeps keep their work and say so."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


#: Exit status of a run stopped by SIGINT or SIGTERM (the shell's 128 + signal number).
INTERRUPTED = {False: 128 + signal.SIGINT, True: 128 + signal.SIGTERM}


def main(argv: list[str] | None = None) -> int:
    """Run a command; what can go wrong is one line on stderr and an exit status.

    0 done; 1 a sweep task failed, or the machine refused a file operation (disk full, ...);
    2 bad input (the line names the argument or key); 3 done but untrustworthy (``run``,
    ``sweep``); 130 / 143 interrupted by SIGINT / SIGTERM (finished work kept). Anything
    else is a bug in the library: its traceback is printed, followed by a line saying so.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    name = f"meanfield {args.command}"
    try:
        with _sigterm_as_interrupt():
            return args.handler(args)
    except KeyboardInterrupt as interrupt:
        print(f"{name}: {'terminated' if isinstance(interrupt, Terminated) else 'interrupted'}; "
              f"{args.kept or 'nothing was written'}", file=sys.stderr)
        return INTERRUPTED[isinstance(interrupt, Terminated)]
    except SweepTaskError as error:
        print(f"{name}: error: {error}", file=sys.stderr)
        return 1
    except StepSizeCollapse as error:  # a run that cannot go on (nothing was computed to keep)
        print(f"{name}: stopped: {error}", file=sys.stderr)
        return 3
    except (ValueError, TypeError) as error:  # ConfigError, and bad parameters: say which, like argparse
        print(f"{name}: error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # the machine, not the input: a full disk, a folder removed under the run
        print(f"{name}: error: {error}", file=sys.stderr)
        return 1
    except Exception:  # noqa: BLE001 - the last resort: say that it is a bug, with what to report
        traceback.print_exc()
        print(f"{name}: internal error: this is a bug in meanfield {_version()}; please report it with "
              f"the command and the traceback above", file=sys.stderr)
        return 70


def _version() -> str:
    return package_version()


if __name__ == "__main__":
    sys.exit(main())
