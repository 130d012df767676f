"""Back-ends, tasks, the PDBQT reader and the Vina-like score."""

import builtins
import json

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from jaxgen.selectivity import (
    XS_TYPES,
    BackendUnavailableError,
    PoseScoreBackend,
    SelectToy,
    StructureDataUnavailableError,
    SurrogateBackend,
    TargetSpec,
    Task,
    VinaBackend,
    evaluate_samples,
    load_task_manifest,
    offline_tasks,
    parse_pdbqt,
    vinalike_energy,
    vinalike_terms,
)

# Six atoms written for this test: an amide fragment (C, O acceptor, N donor with its polar H),
# a methyl carbon and a chlorine. Columns follow the PDB fixed format; the AD type is last.
PDBQT = """\
ATOM      1  C1  LIG A   1       0.000   0.000   0.000  0.00  0.00     0.200 C
ATOM      2  O1  LIG A   1       1.230   0.000   0.000  0.00  0.00    -0.270 OA
ATOM      3  N1  LIG A   1      -0.700   1.150   0.000  0.00  0.00    -0.350 N
ATOM      4  H1  LIG A   1      -0.300   2.050   0.000  0.00  0.00     0.160 HD
ATOM      5  C2  LIG A   1      -0.800  -1.280   0.000  0.00  0.00     0.030 C
ATOM      6 CL1  LIG A   1      -0.300  -2.900   0.300  0.00  0.00    -0.080 Cl
"""


def test_parse_pdbqt_hand_written():
    atoms = parse_pdbqt(PDBQT)
    np.testing.assert_array_equal(
        atoms.coords,
        [[0, 0, 0], [1.23, 0, 0], [-0.7, 1.15, 0], [-0.8, -1.28, 0], [-0.3, -2.9, 0.3]],
    )
    names = [XS_TYPES[i] for i in atoms.xs_type]
    # C1 bonds O and N (polar C); C2 bonds Cl (polar); N has a polar H (donor); OA acceptor.
    assert names == ["C_P", "O_A", "N_D", "C_P", "Cl_H"]
    with pytest.raises(ValueError, match="no ATOM"):
        parse_pdbqt("REMARK nothing\n")
    with pytest.raises(ValueError, match="unknown AutoDock atom type"):
        parse_pdbqt(PDBQT.replace(" Cl\n", " Xx\n"))


def test_vinalike_terms_invariance_and_gradient():
    d = jnp.array([-0.5, 0.0, 0.3, 1.0, 2.0])
    g1, g2, rep, hyd, hb = vinalike_terms(d)
    np.testing.assert_allclose(g1, np.exp(-((np.asarray(d) / 0.5) ** 2)), rtol=1e-12)
    np.testing.assert_allclose(g2, np.exp(-(((np.asarray(d) - 3) / 2) ** 2)), rtol=1e-12)
    np.testing.assert_allclose(rep, [0.25, 0, 0, 0, 0], rtol=1e-12)
    np.testing.assert_allclose(hyd, [1, 1, 1, 0.5, 0], rtol=1e-12)
    np.testing.assert_allclose(hb, [0.5 / 0.7, 0, 0, 0, 0], rtol=1e-12)
    lig = parse_pdbqt(PDBQT)
    rec_xyz = lig.coords + np.array([6.0, 0.5, 0.0])
    args = (
        jnp.asarray(lig.coords),
        jnp.asarray(lig.xs_type),
        jnp.asarray(rec_xyz),
        jnp.asarray(lig.xs_type),
    )
    # energy and ligand-coordinate gradient in ONE compiled program, reused for every check
    energy = jax.jit(
        jax.value_and_grad(
            lambda lig_xyz, rec_xyz: vinalike_energy(
                lig_xyz, args[1], rec_xyz, args[3], 2, smooth_cutoff=True
            )
        )
    )
    e, grad = energy(args[0], args[2])
    # rigid motion of ligand and pocket together leaves the energy unchanged
    theta = 0.7
    R = jnp.array(
        [[np.cos(theta), -np.sin(theta), 0], [np.sin(theta), np.cos(theta), 0], [0, 0, 1.0]]
    )
    shift = jnp.array([1.0, -2.0, 0.5])
    moved = (args[0] @ R.T + shift[None, :], args[2] @ R.T + shift[None, :])
    np.testing.assert_allclose(energy(*moved)[0], e, rtol=1e-9)
    assert float(e) < 0  # attractive at this separation
    # reverse-mode gradient against a central difference along a random direction (what
    # `check_grads(order=1, modes=("rev",))` does, same eps and tolerances)
    v = jr.normal(jr.key(0), args[0].shape)
    eps = 1e-4
    numeric = (energy(args[0] + eps * v, args[2])[0] - energy(args[0] - eps * v, args[2])[0]) / (
        2 * eps
    )
    np.testing.assert_allclose(jnp.sum(grad * v), numeric, atol=1e-5, rtol=1e-5)


def test_backends_fail_clearly(monkeypatch, tmp_path):
    real_import = builtins.__import__

    def no_vina(name, *a, **k):
        if name == "vina" or name.startswith("vina."):
            raise ImportError("No module named 'vina'")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_vina)
    with pytest.raises(BackendUnavailableError, match="'vina'.*jaxgen\\[docking\\]"):
        VinaBackend()
    # Bad settings are named before the missing package is looked for.
    with pytest.raises(ValueError, match="`exhaustiveness` must be an int >= 1"):
        VinaBackend(exhaustiveness=0)
    with pytest.raises(ValueError, match="`mode` must be"):
        PoseScoreBackend(mode="dock")
    monkeypatch.setattr(builtins, "__import__", real_import)
    with pytest.raises(ValueError, match="`size` must be finite and > 0"):
        TargetSpec("X", "x.pdbqt", (0.0, 0.0, 0.0), (20.0, float("nan"), 20.0))
    with pytest.raises(ValueError, match="`center` must be finite"):
        TargetSpec("X", "x.pdbqt", (0.0, float("inf"), 0.0), (20.0, 20.0, 20.0))
    missing = TargetSpec("X", str(tmp_path / "nope.pdbqt"), (0.0, 0.0, 0.0), (20.0, 20.0, 20.0))
    with pytest.raises(StructureDataUnavailableError, match="never downloads"):
        missing.check_files()
    manifest = tmp_path / "tasks.json"
    (tmp_path / "r.pdbqt").write_text(PDBQT)
    manifest.write_text(
        json.dumps(
            {
                "tasks": [
                    {
                        "name": "mine",
                        "on": {
                            "name": "R",
                            "receptor": "r.pdbqt",
                            "center": [0, 0, 0],
                            "size": [20, 20, 20],
                        },
                        "off": ["DRD2"],
                    }
                ]
            }
        )
    )
    tasks = load_task_manifest(str(manifest))
    assert tasks["mine"].on.receptor_pdbqt == str(tmp_path / "r.pdbqt")
    with pytest.raises(StructureDataUnavailableError):
        load_task_manifest(str(tmp_path / "absent.json"))
    assert offline_tasks()["DRD3_vs_DRD2"].off == ("DRD2",)
    with pytest.raises(ValueError, match="off-target"):
        Task("t", "A", ())


def test_surrogate_backend_and_evaluate_samples():
    toy = SelectToy.default()
    backend = SurrogateBackend({"on": toy.on, "off": toy.off[0]})
    x = toy.sample_prior(jr.key(0), 500)
    table = backend.score(x, ["on", "off"], seed=3)
    direct = toy.dock(jr.key(3), x)
    np.testing.assert_allclose(table.scores, direct, rtol=1e-12)
    out = evaluate_samples({"t": x}, {"t": Task("t", "on", ("off",))}, backend, seed=3)
    assert out["t"]["num_evaluable"] == 500 and 0 <= out["t"]["success_rate"] <= 1
    with pytest.raises(ValueError, match="unknown targets"):
        backend.score(x, ["on", "other"])
    assert jax.tree_util.tree_leaves(jnp.asarray(table.valid)).__len__() == 1


@pytest.mark.slow
def test_real_docking_paracetamol_into_drd2():
    """Check 10 with a real engine (needs the docking extra): a finite score in [-9, -4]."""
    pytest.importorskip("vina")
    pytest.importorskip("dockstring")
    table = VinaBackend(exhaustiveness=1).score(["CC(=O)Nc1ccc(O)cc1"], ["DRD2"], seed=0)
    assert table.valid[0, 0], table.reasons
    assert -9.0 <= table.scores[0, 0] <= -4.0
