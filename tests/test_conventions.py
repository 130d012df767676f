"""The public API follows one convention (docs/concepts/conventions.md), read off the signatures.

- Trainers: every public trainer is ``fit_<method>(model, data, ..., *, key, num_steps,
  optimizer=None, ..., **fit_options: Unpack[FitOptions]) -> FitResult`` (or a subclass), built on
  `jaxgen.core.fit`; no public function is named like a trainer otherwise (``train_*``,
  ``*_train``) or returns a `FitResult` under another name.
- Random functions (samplers, data generators, estimators with random starts) take ``key`` as
  their first positional parameter, like ``jax.random``; constructors (classes, and functions
  that build modules) take it keyword-only, like equinox.
- Losses plug into `jaxgen.core.fit` through ``functools.partial``: ``(model, batch, key, *,
  options)``.

Every exemption is listed below with its reason; a new public name that breaks a rule fails here.
"""

import dataclasses
import importlib
import inspect
import pkgutil
import typing

import jax.numpy as jnp
import numpy as np
import pytest

import jaxgen
from jaxgen.core import FIT_OPTIONS, FitOptions, FitResult

FAMILIES = sorted(
    m.name for m in pkgutil.iter_modules(jaxgen.__path__) if not m.name.startswith("_")
)

# name -> reason. Functions that are not trainers although their name or return type says so,
# or trainers that cannot follow the trainer signature.
TRAINER_EXEMPT = {
    "core.fit": "the generic loop every trainer is built on (its options are FitOptions)",
    "core.train_step": "one compiled optimiser step of `fit` (for assert_max_traces), no loop",
    "dictionary.fit_padl": (
        "alternating proximal minimisation (FISTA codes + closed-form dictionary steps, MDL "
        "hyper-parameters), not gradient steps, so not built on `fit`: data X first (no "
        "model), no optimizer, outer iterations counted by max_steps (no num_steps). It "
        "follows the rest: key keyword-only, returns PADLResult(FitResult) (model = the "
        "dictionary, losses = the objective per outer iteration), takes **fit_options with "
        "callback/checkpoint/progress as in `fit` (exact resume) and rejects steps_per_call, "
        "mesh, shard_params, on_nonfinite"
    ),
}

# name -> reason. Functions with a `key` that do not take it first.
KEY_EXEMPT = {
    "core.train_step": "the compiled step of `fit`, (model, opt_state, key, step, ...)",
    "core.make_step": "one optimiser step with the loss signature (model, opt_state, batch, key)",
    "core.solve_sde": (
        "the SDE twin of `solve_ode` (terms, y0, *, options): the key only seeds the Brownian "
        "path, keyword-only as diffrax's VirtualBrownianTree"
    ),
}

# name -> reason. Losses whose form is not (model, batch, key, *, options).
LOSS_EXEMPT = {
    "bridges.full_tree_loss": (
        "Monte-Carlo estimator of the NBFFG objective of one tree (a random function, key "
        "first); `fit_nbffg` is its trainer"
    ),
    "bridges.path_loss": "as `full_tree_loss`, on a batch of leaf paths",
    "flows.fake_score_loss": "one player of the two-network score-distillation step",
    "flows.vsd_loss": "one player of the two-network score-distillation step",
}

# Functions that build a module (constructors): `key` keyword-only, like equinox.
CONSTRUCTORS = {
    "nn.make_mixer",
    "transformers.attach_lora",
    "transformers.attach_qes",
}


def _public_functions():
    for fam in FAMILIES:
        mod = importlib.import_module(f"jaxgen.{fam}")
        for name in sorted(vars(mod)):
            obj = getattr(mod, name)
            if name.startswith("_") or inspect.isclass(obj) or inspect.ismodule(obj):
                continue
            if not inspect.isfunction(obj) and hasattr(obj, "__wrapped__"):
                obj = inspect.unwrap(obj)  # jitted (eqx.filter_jit, jax.jit)
            if inspect.isfunction(obj):
                yield f"{fam}.{name}", obj


def _public_classes():
    for fam in FAMILIES:
        mod = importlib.import_module(f"jaxgen.{fam}")
        for name in sorted(vars(mod)):
            obj = getattr(mod, name)
            if not name.startswith("_") and inspect.isclass(obj):
                yield f"{fam}.{name}", obj


FUNCTIONS = dict(_public_functions())
TRAINERS = sorted(
    n for n in FUNCTIONS if n.split(".")[1].startswith("fit_") and n not in TRAINER_EXEMPT
)


def _return_type(fn):
    try:
        return typing.get_type_hints(fn).get("return")
    except Exception:  # unresolvable forward references: fall back to the raw annotation
        return inspect.signature(fn).return_annotation


def _is_fit_result(tp) -> bool:
    return inspect.isclass(tp) and issubclass(tp, FitResult)


def _is_loss(qualname: str) -> bool:
    name = qualname.split(".")[1]
    return "_loss" in name or name == "nelbo"


def test_every_family_is_scanned():
    assert len(FAMILIES) >= 15 and len(FUNCTIONS) > 200
    assert len(TRAINERS) >= 10, TRAINERS


def test_no_public_trainer_outside_fit():
    bad = []
    for qualname, fn in FUNCTIONS.items():
        name = qualname.split(".")[1]
        if qualname in TRAINER_EXEMPT or name.startswith("fit_"):
            continue
        if name.startswith("train_") or name.endswith(("_train", "_training")):
            bad.append(f"{qualname}: named like a trainer")
        elif _is_fit_result(_return_type(fn)):
            bad.append(f"{qualname}: returns a FitResult")
    assert not bad, "rename to fit_<method>:\n" + "\n".join(bad)


@pytest.mark.parametrize("qualname", TRAINERS)
def test_trainer_signature(qualname):
    fn = FUNCTIONS[qualname]
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())
    hints = typing.get_type_hints(fn)
    # returns FitResult or a subclass with the extras as fields
    assert _is_fit_result(hints.get("return")), f"{qualname} returns {hints.get('return')}"
    # the model first, positional
    assert params[0].kind == inspect.Parameter.POSITIONAL_OR_KEYWORD, params[0]
    assert params[0].name != "key"
    # key, num_steps, optimizer keyword-only; optimizer optional with default None
    for name in ("key", "num_steps", "optimizer"):
        assert name in sig.parameters, f"{qualname} has no `{name}`"
        assert sig.parameters[name].kind == inspect.Parameter.KEYWORD_ONLY, (qualname, name)
    assert sig.parameters["optimizer"].default is None, qualname
    # fit's options forwarded as **fit_options: Unpack[FitOptions], none of them re-declared
    var_kw = [p for p in params if p.kind == inspect.Parameter.VAR_KEYWORD]
    assert var_kw and var_kw[0].name == "fit_options", f"{qualname} does not forward fit options"
    assert hints["fit_options"] == typing.Unpack[FitOptions], hints["fit_options"]
    assert not set(FIT_OPTIONS) & set(sig.parameters), qualname


@pytest.mark.parametrize(
    "qualname", sorted(n for n in TRAINER_EXEMPT if n.split(".")[1].startswith("fit_"))
)
def test_exempt_trainers_keep_the_rest(qualname):
    """An exempt ``fit_<method>`` still returns a FitResult subclass, takes ``key`` keyword-only
    and forwards ``**fit_options: Unpack[FitOptions]`` (none of them re-declared)."""
    fn = FUNCTIONS[qualname]
    sig = inspect.signature(fn)
    hints = typing.get_type_hints(fn)
    assert _is_fit_result(hints.get("return")), f"{qualname} returns {hints.get('return')}"
    assert sig.parameters["key"].kind == inspect.Parameter.KEYWORD_ONLY, qualname
    var_kw = [p for p in sig.parameters.values() if p.kind == inspect.Parameter.VAR_KEYWORD]
    assert var_kw and var_kw[0].name == "fit_options", f"{qualname} does not take fit options"
    assert hints["fit_options"] == typing.Unpack[FitOptions], hints["fit_options"]
    assert not set(FIT_OPTIONS) & set(sig.parameters), qualname


def test_check_fit_options_names_unknown_and_unsupported_options():
    check = jaxgen.core.check_fit_options
    assert check({"progress": False}) == {"progress": False}
    with pytest.raises(TypeError, match=r"unknown option\(s\) \['steps'\]"):
        check({"steps": 3})
    unsupported = {"mesh": "no data to shard", "on_nonfinite": "no gradient step"}
    # fit's defaults pass, anything else names the option, the reason and the value
    check({"mesh": None, "on_nonfinite": "raise"}, unsupported=unsupported)
    with pytest.raises(ValueError, match=r"`on_nonfinite` does not apply here: no gradient"):
        check({"on_nonfinite": "skip_step"}, unsupported=unsupported)
    with pytest.raises(ValueError, match=r"`mesh` does not apply here: no data.*got 1"):
        check({"mesh": 1}, unsupported=unsupported)


def test_fit_options_are_fit_keywords():
    sig = inspect.signature(jaxgen.core.fit)
    for name in FIT_OPTIONS:
        assert sig.parameters[name].kind == inspect.Parameter.KEYWORD_ONLY, name
    assert sig.parameters["progress"].default is True


def test_random_functions_take_key_first():
    bad = []
    for qualname, fn in FUNCTIONS.items():
        sig = inspect.signature(fn)
        if "key" not in sig.parameters or qualname in KEY_EXEMPT or qualname in LOSS_EXEMPT:
            continue
        params = list(sig.parameters.values())
        p = sig.parameters["key"]
        if qualname in TRAINERS or qualname in TRAINER_EXEMPT or qualname in CONSTRUCTORS:
            if p.kind != inspect.Parameter.KEYWORD_ONLY:
                bad.append(f"{qualname}: `key` must be keyword-only (trainer / constructor)")
        elif _is_loss(qualname):
            # (model, batch, key, *, options): partial(loss, **options) plugs into `fit`
            names = [q.name for q in params[:3]]
            if names[2:3] != ["key"]:
                bad.append(f"{qualname}: a loss takes (model, batch, key, *, options), got {names}")
        elif params[0].name != "key":
            bad.append(f"{qualname}: a random function takes `key` first, got {params[0].name}")
    assert not bad, "\n".join(bad)


def test_constructors_take_key_keyword_only():
    bad = []
    for qualname, cls in _public_classes():
        try:
            sig = inspect.signature(cls.__init__)
        except (TypeError, ValueError):
            continue
        p = sig.parameters.get("key")
        if p is not None and p.kind != inspect.Parameter.KEYWORD_ONLY:
            bad.append(qualname)
    assert not bad, f"`key` must be keyword-only in: {bad}"


def test_fit_result_subclasses_keep_the_fields():
    from jaxgen.deconvolution import ConvMMDResult
    from jaxgen.energy import JEMResult
    from jaxgen.transformers import ABLResult, FinePruneResult

    base = FitResult(model=1.0, opt_state=None, losses=np.zeros(3), resumed_from=0)
    for cls, extra in (
        (JEMResult, {"buffer": None}),
        (ConvMMDResult, {"bandwidths": jnp.ones(2)}),
        (ABLResult, {"isolated": np.zeros(2, bool)}),
        (FinePruneResult, {"pruned_frac": 0.5}),
    ):
        r = cls.extend(base, model=2.0, **extra)
        assert isinstance(r, FitResult) and r.model == 2.0 and r.resumed_from == 0
        name, value = next(iter(extra.items()))
        assert getattr(r, name) is value
        assert dataclasses.replace(r, model=3.0).model == 3.0
