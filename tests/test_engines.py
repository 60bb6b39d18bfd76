"""Every particle engine against its model's reference right-hand side (meanfield.engines.check_consistency).

The references themselves are tested against exact results elsewhere (test_models,
test_particles, test_causal): here each engine is checked, for every model the library
accepts, against the model's own numpy methods, and the check is shown to catch a wrong engine.
"""

import math

import array_api_strict as xps
import numpy as np
import pytest

import meanfield as mf
from meanfield.engines import check_consistency, engines_for
from meanfield.protocols import Model, ParticleEngine, ZonalModel


def general_model(d):
    rng = np.random.default_rng(7)
    heads = 2
    return mf.SelfAttention(1.5, query=np.eye(d) + 0.2 * rng.normal(size=(heads, d, d)),
                            key=np.eye(d) + 0.2 * rng.normal(size=(heads, d, d)),
                            value=np.eye(d) + 0.1 * rng.normal(size=(heads, d, d)))


MODELS = {
    "SA": lambda d: mf.SelfAttention(4.0),
    "USA": lambda d: mf.SelfAttention(2.0, normalized=False),
    "repulsive": lambda d: mf.SelfAttention(3.0, value=-1.0),
    "USA-rescaled": lambda d: mf.SelfAttention(20.0, normalized=False, time_rescaled=True),
    "Kuramoto": lambda d: mf.SelfAttention(0.0),
    "large-beta-SA": lambda d: mf.SelfAttention(900.0),
    "general-heads": general_model,
    "perceptron": lambda d: mf.SelfAttention(1.0, external=mf.Perceptron([1.0, -0.5], np.eye(d)[:2])),
    "zonal-aggregation": lambda d: mf.ZonalAggregation(np.exp, np.exp),
    "causal-SA": lambda d: mf.CausalAttention(beta=2.0, normalized=True, alibi=0.5),
    "causal-USA": lambda d: mf.CausalAttention(beta=1.0, normalized=False, alibi=2.0, include_self=False),
}


@pytest.mark.parametrize("d", [2, 3, 5])
@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("n", [24, 300], ids=["n24", "n300"])
def test_every_engine_agrees_with_the_reference(name, d, n, rng):
    model = MODELS[name](d)
    x = mf.sample_uniform(n, d, rng, batch=3)
    records = check_consistency(model, x)
    compared = {record.engine for record in records}
    # The engines a model must have (the fast paths the library promises for it).
    if name in ("SA", "USA", "repulsive", "USA-rescaled", "Kuramoto") and d in (2, 3):
        assert "series" in compared
    if isinstance(model, mf.SelfAttention) and n <= 256:
        assert "fused" in compared
    if name.startswith("causal") and d == 2:
        assert "series" in compared


@pytest.mark.parametrize("name", [name for name in MODELS if not name.startswith(("causal", "zonal", "perceptron"))])
def test_the_array_api_engine_agrees_with_the_reference(name, rng):
    model = MODELS[name](3)
    x = mf.sample_uniform(20, 3, rng, batch=2)
    records = check_consistency(model, x, like=xps.asarray(np.zeros(1)))
    assert [record.engine for record in records] == ["array_api"]


EUCLIDEAN_MODELS = {
    "original": lambda: mf.PureAttention(beta=2.0),
    "rescaled": lambda: mf.PureAttention(beta=1.0, value=np.diag([1.0, 0.5, -0.5]), rescaled=True),
    "heads": lambda: mf.PureAttention(beta=1.5, query=np.eye(3) + 0.3 * np.random.default_rng(3).normal(size=(2, 3, 3)),
                                      value=0.5 * np.random.default_rng(4).normal(size=(2, 3, 3))),
    "hardmax": lambda: mf.PureAttention(beta=math.inf, rescaled=True),
}


@pytest.mark.parametrize("name", list(EUCLIDEAN_MODELS))
def test_the_euclidean_array_api_engine_agrees_with_the_reference(name, rng):
    """PureAttention has one engine besides its reference velocity_at: the array API one."""
    model = EUCLIDEAN_MODELS[name]()
    x = rng.normal(size=(2, 20, 3))
    assert check_consistency(model, x) == []
    records = check_consistency(model, x, like=xps.asarray(np.zeros(1)))
    assert [record.engine for record in records] == ["array_api"]


def test_the_check_catches_a_euclidean_engine_that_is_off(rng, monkeypatch):
    from meanfield.engines import EuclideanArrayAPIKernel

    drift = EuclideanArrayAPIKernel.velocity_at
    monkeypatch.setattr(EuclideanArrayAPIKernel, "velocity_at", lambda self, x, m: drift(self, x, m) * (1 + 1e-9))
    with pytest.raises(AssertionError, match="engine 'array_api'.*velocity_at"):
        check_consistency(mf.PureAttention(beta=2.0), rng.normal(size=(2, 10, 3)), like=xps.asarray(np.zeros(1)))


def test_the_check_catches_an_engine_that_is_off(rng, monkeypatch):
    """An engine whose velocity is off by 1e-9 of its scale is named."""
    model = mf.SelfAttention(2.0)
    x = mf.sample_uniform(16, 3, rng, batch=2)
    engine = engines_for(model, x)["fused"]
    drift = engine.velocity_unchecked
    monkeypatch.setattr(type(engine), "velocity_unchecked", lambda self, y: drift(y) * (1 + 1e-9))
    with pytest.raises(AssertionError, match="engine 'fused'.*velocity_unchecked"):
        check_consistency(model, x)



def protocol_members(protocol) -> set[str]:
    """The attributes and methods a protocol declares (its own and its bases')."""
    members = set()
    for cls in protocol.__mro__:
        if cls.__module__ == protocol.__module__:
            members |= set(vars(cls).get("__annotations__", {}))
            members |= {name for name, value in vars(cls).items() if callable(value) and not name.startswith("_")}
    return members


@pytest.mark.parametrize("name", list(MODELS))
def test_every_model_provides_the_model_protocol(name):
    """What integrators, engines and solvers read of a model is there on every model (no hasattr probing)."""
    model = MODELS[name](3)
    members = protocol_members(ZonalModel if model.is_zonal else Model)
    assert {"velocity", "energy", "logit_bound", "causal"} <= members  # the protocol is read, not empty
    assert [member for member in sorted(members) if not hasattr(model, member)] == []


@pytest.mark.parametrize("name", list(MODELS))
def test_every_engine_provides_the_engine_protocol(name, rng):
    model = MODELS[name](3)
    x = mf.sample_uniform(8, 3, rng, batch=2)
    members = protocol_members(ParticleEngine)
    for engine_name, engine in engines_for(model, x).items():
        assert [member for member in sorted(members) if not hasattr(engine, member)] == [], engine_name


@pytest.mark.parametrize("model", [mf.SelfAttention(4.0), mf.SelfAttention(3.0, normalized=False),
                                   mf.SelfAttention(800.0), mf.SelfAttention(2.0, normalized=False, time_rescaled=True)])
@pytest.mark.parametrize("d, n", [(2, 32), (3, 32), (8, 32), (2, 2000)])
def test_the_energys_fast_pair_sums_are_the_models_reference(model, d, n):
    """energy_pair_sum (the series where the steps take it, else the Gram matrices) against the model's own sums."""
    from meanfield.engines.kernels import energy_pair_sum

    x = mf.sample_uniform(n, d, np.random.default_rng(0), batch=4)
    fast = energy_pair_sum(model, x)
    assert fast is not None
    np.testing.assert_allclose(model.log_energy(x, log_pair_sum=fast), model.log_energy(x), rtol=1e-13, atol=1e-12)
