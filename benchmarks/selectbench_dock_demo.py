"""SelectBench docking demo: real ligands docked into dockstring pockets (needs the docking extra).

Docks the ligand sets that ship inside RDKit's Contrib folder (CDK2, c-Met and EGFR ligands)
into the on-target pockets and a few off-target and safety-panel pockets that ship inside
``dockstring``, with `jaxgen.selectivity.VinaBackend` (results cached in JSON lines, so an
interrupted run resumes), writes ``selectbench_dock_demo.csv`` (scores and RDKit file/index
references, never copied SMILES) and reports the on-target top-1 rate and the selectivity
success rate per ligand set. CPU-bound: about 1.6 h on 2 cores at exhaustiveness 2 for the full
configuration. Without a docking back-end the run records ``"skipped": reason`` and no claim.
"""

import csv
import os

import jax.numpy as jnp
import numpy as np

from jaxgen.selectivity import (
    BackendUnavailableError,
    StructureDataUnavailableError,
    VinaBackend,
    success_rate,
    top1_rate,
)

NAME = "selectbench_dock_demo"
PAPER = "SelectBench: the selectivity of generative structure-based drug design (NeurIPS 2026)"
_SETS = {
    "cdk2": ("cdk2.sdf", "CDK2", ("MAPK1", "SRC", "LCK")),
    "cmet": ("cmet_ligands.sdf", "MET", ("ABL1", "KDR", "EGFR")),
    "egfr": ("egfr.sdf", "EGFR", ("ABL1", "SRC", "KDR")),
}
CONFIGS = {
    "quick": {"sets": ["cdk2"], "max_ligands": 4, "exhaustiveness": 1, "seed": 0},
    "full": {"sets": ["cdk2", "cmet", "egfr"], "max_ligands": 72, "exhaustiveness": 2, "seed": 0},
}
# --full --smoke: the full configuration's code path, every size cut to the least that runs.
SMOKE = {"sets": ["cdk2"], "max_ligands": 1, "exhaustiveness": 1}


def _ligands(filename, limit):
    from rdkit import Chem, RDConfig

    path = os.path.join(RDConfig.RDContribDir, filename)
    if not os.path.isfile(path):
        raise StructureDataUnavailableError(f"RDKit Contrib ligand file {path!r} not found.")
    out = []
    for i, mol in enumerate(Chem.SDMolSupplier(path)):
        if mol is not None:
            out.append((f"{filename}#{i}", Chem.MolToSmiles(mol)))
        if len(out) >= limit:
            break
    return out


def run(config, key, rec):
    del key  # docking is seeded by config["seed"]
    cache = os.path.join(os.environ.get("JAXGEN_CACHE", ".cache"), "selectbench_dock")
    try:
        backend = VinaBackend(exhaustiveness=config["exhaustiveness"], cache_dir=cache)
        import rdkit  # noqa: F401 - the ligand sets ship inside RDKit
    except (BackendUnavailableError, ImportError) as e:
        rec.metric("skipped", f"no docking back-end: {e}")
        rec.note(f"skipped: {e}")
        return
    rows = []
    for name in config["sets"]:
        filename, on, off = _SETS[name]
        ligands = _ligands(filename, config["max_ligands"])
        table = backend.score([s for _, s in ligands], [on, *off], seed=config["seed"])
        S, valid = jnp.asarray(table.scores), jnp.asarray(table.valid)
        rec.metric(f"{name}/top1_rate", float(top1_rate(S, valid)))
        rec.metric(f"{name}/success_rate", float(success_rate(S, valid)))
        rec.metric(f"{name}/failures", int(np.sum(~table.valid)))
        for (ref, _), scores, reasons in zip(ligands, table.scores, table.reasons, strict=True):
            rows.append([name, ref, *[f"{v:.3f}" for v in scores], *reasons])
    path = os.path.join(rec.out_dir, f"{NAME}.csv")
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows(rows)
    rec.note(f"scores written to {os.path.basename(path)}; docking cache in {cache}")


def plan(config, key):
    """`python -m benchmarks plan`: nothing to compile (docking runs in AutoDock Vina on the
    CPU, outside JAX).
    """
    return []
