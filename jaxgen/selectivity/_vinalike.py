r"""A differentiable Vina-like pocket score and a PDBQT reader (a jaxgen surrogate).

Heavy atoms only. With surface distance :math:`d_{ij} = r_{ij} - R_i - R_j` (XS radii) each
pair closer than 8 Å contributes

.. math:: -0.035579 e^{-(d/0.5)^2} - 0.005156 e^{-((d-3)/2)^2} + 0.840245 d^2 1[d<0]
          - 0.035069\,\mathrm{hyd}(d) 1[\text{both hydrophobic}]
          - 0.587439\,\mathrm{hb}(d) 1[\text{donor-acceptor}],

and the affinity is the sum divided by :math:`1 + 0.05846 N_{rot}` (Trott & Olson 2010).
Atoms carry an integer XS type (`XS_TYPES`); `parse_pdbqt` infers it from the AutoDock type and
bonds found by distance (PDBQT has no bonds).
"""

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int

from ..core.checks import check_finite

#: XS atom types: element and role (H hydrophobic, P polar, D donor, A acceptor, DA both).
XS_TYPES = (
    "C_H",
    "C_P",
    "N_P",
    "N_D",
    "N_A",
    "N_DA",
    "O_P",
    "O_D",
    "O_A",
    "O_DA",
    "S_P",
    "P_P",
    "F_H",
    "Cl_H",
    "Br_H",
    "I_H",
    "Met_D",
)
_RADIUS = {
    "C": 1.9,
    "N": 1.8,
    "O": 1.7,
    "S": 2.0,
    "P": 2.1,
    "F": 1.5,
    "Cl": 1.8,
    "Br": 2.0,
    "I": 2.2,
    "Met": 1.2,
}
_XS_RADIUS = np.array([_RADIUS[t.split("_")[0]] for t in XS_TYPES])
_XS_HYDROPHOBIC = np.array([t.endswith("_H") for t in XS_TYPES])
_XS_DONOR = np.array([t.endswith("_D") or t.endswith("_DA") for t in XS_TYPES])
_XS_ACCEPTOR = np.array([t.endswith("_A") or t.endswith("_DA") for t in XS_TYPES])
_COVALENT = {
    "H": 0.31,
    "C": 0.76,
    "N": 0.71,
    "O": 0.66,
    "S": 1.05,
    "P": 1.07,
    "F": 0.57,
    "Cl": 1.02,
    "Br": 1.2,
    "I": 1.39,
    "Met": 1.4,
}
_METALS = {"Mg", "Mn", "Zn", "Ca", "Fe", "MG", "MN", "ZN", "CA", "FE"}
_CUTOFF = 8.0


class Atoms(NamedTuple):
    """Heavy atoms read from a PDBQT: ``coords (A, 3)`` Å, ``xs_type (A,)`` indices into
    `XS_TYPES`, ``ad_type`` the AutoDock types (strings).
    """

    coords: np.ndarray
    xs_type: np.ndarray
    ad_type: tuple[str, ...]


def _element(ad: str) -> str:
    if ad in _METALS:
        return "Met"
    if ad in ("A", "C"):
        return "C"
    if ad in ("NA", "N", "NS"):
        return "N"
    if ad in ("OA", "O", "OS"):
        return "O"
    if ad in ("SA", "S"):
        return "S"
    if ad.upper() in ("CL", "BR"):
        return ad[0].upper() + ad[1].lower()
    if ad in ("HD", "HS", "H"):
        return "H"
    if ad in ("P", "F", "I"):
        return ad
    raise ValueError(f"unknown AutoDock atom type {ad!r} in PDBQT input.")


def parse_pdbqt(text: str) -> Atoms:
    """Heavy atoms of a PDBQT string with XS types (donors: N/O bonded to a polar H).

    Coordinates come from the fixed PDB columns 31-54; the AutoDock type is the last field of
    each ``ATOM``/``HETATM`` line. Bonds are inferred by distance (<= 1.1 x the sum of covalent
    radii). Raises `ValueError` on a malformed line or an unknown type.
    """
    coords, ads = [], []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.startswith(("ATOM", "HETATM")):
            continue
        try:
            xyz = [float(line[30:38]), float(line[38:46]), float(line[46:54])]
            ad = line.split()[-1]
        except (ValueError, IndexError) as e:
            raise ValueError(f"malformed PDBQT atom line {n}: {line!r}") from e
        coords.append(xyz)
        ads.append(ad)
    if not coords:
        raise ValueError("the PDBQT text has no ATOM/HETATM line.")
    xyz = np.asarray(coords, dtype=np.float64)
    elements = [_element(a) for a in ads]
    cov = np.array([_COVALENT[e] for e in elements])
    dist = np.linalg.norm(xyz[:, None] - xyz[None], axis=-1)
    bonded = (dist <= 1.1 * (cov[:, None] + cov[None, :])) & ~np.eye(len(xyz), dtype=bool)
    types, keep = [], []
    for i, (e, ad) in enumerate(zip(elements, ads, strict=True)):
        if e == "H":
            continue
        nbrs = np.flatnonzero(bonded[i])
        if e == "C":
            hetero = any(elements[j] not in ("C", "H") for j in nbrs)
            xs = "C_P" if hetero else "C_H"
        elif e in ("N", "O"):
            donor = any(ads[j] == "HD" for j in nbrs)
            acceptor = ad in ("OA", "NA")
            xs = f"{e}_" + (
                "DA" if donor and acceptor else "D" if donor else "A" if acceptor else "P"
            )
        elif e in ("F", "Cl", "Br", "I"):
            xs = f"{e}_H"
        elif e == "Met":
            xs = "Met_D"
        else:
            xs = f"{e}_P"
        types.append(XS_TYPES.index(xs))
        keep.append(i)
    return Atoms(xyz[keep], np.asarray(types, np.int32), tuple(ads[i] for i in keep))


def _hyd(d: Array) -> Array:
    return jnp.clip(1.5 - d, 0.0, 1.0)


def _hb(d: Array) -> Array:
    return jnp.clip(-d / 0.7, 0.0, 1.0)


def vinalike_terms(d: Float[ArrayLike, "..."]) -> tuple[Array, Array, Array, Array, Array]:
    """The five Vina terms at surface distance ``d`` (gauss1, gauss2, repulsion, hyd, hbond).

    Raises:
        ValueError: ``d`` not finite (an ``EquinoxRuntimeError`` under `jax.jit`): an infinite
            distance would read as "no interaction" (every term 0).
    """
    return _terms(check_finite(d, "d"))


def _terms(d: ArrayLike) -> tuple[Array, Array, Array, Array, Array]:
    d = jnp.asarray(d)
    return (
        jnp.exp(-((d / 0.5) ** 2)),
        jnp.exp(-(((d - 3.0) / 2.0) ** 2)),
        jnp.where(d < 0, d**2, 0.0),
        _hyd(d),
        _hb(d),
    )


def vinalike_energy(
    lig_xyz: Float[ArrayLike, "L 3"],
    lig_types: Int[ArrayLike, " L"],
    rec_xyz: Float[ArrayLike, "A 3"],
    rec_types: Int[ArrayLike, " A"],
    n_rot: int | float = 0,
    *,
    smooth_cutoff: bool = False,
) -> Float[Array, ""]:
    """Vina-like intermolecular affinity (kcal/mol, lower = better) of a ligand pose in a pocket.

    Args:
        lig_xyz, rec_xyz: heavy-atom coordinates (Å).
        lig_types, rec_types: XS type indices (`XS_TYPES`), e.g. from `parse_pdbqt`.
        n_rot: rotatable bonds of the ligand (the conformational-entropy divisor).
        smooth_cutoff: multiply each pair by a cosine switch on [7, 8] Å (smooth gradients)
            instead of the hard 8 Å cutoff.
    """
    lig_xyz, rec_xyz = jnp.asarray(lig_xyz), jnp.asarray(rec_xyz)
    lig_types, rec_types = jnp.asarray(lig_types), jnp.asarray(rec_types)
    if lig_xyz.ndim != 2 or lig_xyz.shape[1] != 3 or lig_types.shape != lig_xyz.shape[:1]:
        raise ValueError(
            f"ligand coordinates (L, 3) and types (L,) expected, got {lig_xyz.shape} and "
            f"{lig_types.shape}."
        )
    if rec_xyz.ndim != 2 or rec_xyz.shape[1] != 3 or rec_types.shape != rec_xyz.shape[:1]:
        raise ValueError(
            f"pocket coordinates (A, 3) and types (A,) expected, got {rec_xyz.shape} and "
            f"{rec_types.shape}."
        )
    lig_xyz, rec_xyz = check_finite(lig_xyz, "lig_xyz"), check_finite(rec_xyz, "rec_xyz")
    radius = jnp.asarray(_XS_RADIUS, lig_xyz.dtype)
    hydro, donor, acceptor = (jnp.asarray(a) for a in (_XS_HYDROPHOBIC, _XS_DONOR, _XS_ACCEPTOR))
    diff = lig_xyz[:, None, :] - rec_xyz[None, :, :]
    r = jnp.sqrt(jnp.sum(diff**2, axis=-1) + 1e-12)
    d = r - radius[lig_types][:, None] - radius[rec_types][None, :]
    g1, g2, rep, hyd, hb = _terms(d)
    both_h = hydro[lig_types][:, None] & hydro[rec_types][None, :]
    hbond = (donor[lig_types][:, None] & acceptor[rec_types][None, :]) | (
        acceptor[lig_types][:, None] & donor[rec_types][None, :]
    )
    pair = (
        -0.035579 * g1
        - 0.005156 * g2
        + 0.840245 * rep
        - 0.035069 * jnp.where(both_h, hyd, 0.0)
        - 0.587439 * jnp.where(hbond, hb, 0.0)
    )
    if smooth_cutoff:
        switch = jnp.where(
            r < 7.0, 1.0, jnp.where(r < _CUTOFF, 0.5 * (1 + jnp.cos(jnp.pi * (r - 7.0))), 0.0)
        )
        pair = pair * switch
    else:
        pair = jnp.where(r < _CUTOFF, pair, 0.0)
    return jnp.sum(pair) / (1.0 + 0.05846 * n_rot)
