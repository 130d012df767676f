"""Tasks (an on-target and its off-targets) and scoring back-ends that fill score matrices.

jaxgen never downloads structures or models. The offline pockets are the 58 prepared receptors
that ship inside the ``dockstring`` package (extra ``docking``); user structures come through a
JSON manifest. Docking engines are imported lazily: a missing package raises
`BackendUnavailableError` naming it and the extra, a missing file `StructureDataUnavailableError`.
A molecule that fails to dock never raises: its entry is NaN, ``valid`` False, with a reason.
"""

import abc
import dataclasses
import hashlib
import importlib
import importlib.util
import json
import math
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from ..core.checks import check_finite, check_nonnegative, check_positive_int
from ._metrics import summarize

DOCKING_EXTRA = "pip install 'jaxgen[docking]'"


class BackendUnavailableError(ImportError):
    """A scoring back-end's package (or program) is not installed."""


class StructureDataUnavailableError(FileNotFoundError):
    """A receptor or search-box file is missing (jaxgen never downloads structures)."""


def _require(module: str, backend: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise BackendUnavailableError(
            f"the {backend} back-end needs the package {module!r}, which is not installed "
            f"({type(e).__name__}: {e}); install the docking extra: {DOCKING_EXTRA}."
        ) from e


@dataclasses.dataclass(frozen=True)
class TargetSpec:
    """A pocket: a prepared receptor (PDBQT path) and its search box (centre and size, Å)."""

    name: str
    receptor_pdbqt: str
    center: tuple[float, float, float]
    size: tuple[float, float, float]

    def __post_init__(self) -> None:
        if len(self.center) != 3 or len(self.size) != 3:
            raise ValueError(
                f"`center` and `size` must have 3 entries, got {self.center}, {self.size}."
            )
        if not all(math.isfinite(c) for c in self.center):
            raise ValueError(f"box `center` must be finite, got {self.center}.")
        if not all(0 < s < math.inf for s in self.size):
            raise ValueError(f"box `size` must be finite and > 0, got {self.size}.")

    def check_files(self) -> None:
        """Raise `StructureDataUnavailableError` if the receptor file is missing."""
        if not os.path.isfile(self.receptor_pdbqt):
            raise StructureDataUnavailableError(
                f"receptor file {self.receptor_pdbqt!r} of target {self.name!r} not found; "
                "give a prepared PDBQT (jaxgen never downloads structures)."
            )

    @classmethod
    def from_dockstring(cls, name: str) -> "TargetSpec":
        """The pocket of target ``name`` shipped inside the ``dockstring`` package."""
        spec = importlib.util.find_spec("dockstring")
        if spec is None or not spec.submodule_search_locations:
            raise BackendUnavailableError(
                f"target {name!r} comes from the 'dockstring' package, which is not installed; "
                f"install the docking extra: {DOCKING_EXTRA}."
            )
        root = os.path.join(list(spec.submodule_search_locations)[0], "resources", "targets")
        receptor = os.path.join(root, f"{name}_target.pdbqt")
        conf = os.path.join(root, f"{name}_conf.txt")
        for path in (receptor, conf):
            if not os.path.isfile(path):
                raise StructureDataUnavailableError(
                    f"dockstring has no file {path!r} for target {name!r} (known targets: the "
                    f"{len(DOCKSTRING_TARGETS)} of `DOCKSTRING_TARGETS`)."
                )
        values = {}
        with open(conf) as f:
            for line in f:
                if "=" in line:
                    key, val = (p.strip() for p in line.split("=", 1))
                    values[key] = float(val)
        center = tuple(values[f"center_{a}"] for a in "xyz")
        size = tuple(values[f"size_{a}"] for a in "xyz")
        return cls(name, receptor, center, size)  # type: ignore[arg-type]


#: Targets whose prepared pockets ship inside dockstring (offline tasks).
DOCKSTRING_TARGETS = tuple(
    "ABL1 ACHE ADAM17 ADORA2A ADRB1 ADRB2 AKT1 AKT2 AR BACE1 CA2 CASP3 CDK2 CSF1R CYP2C9 CYP3A4 "
    "DHFR DPP4 DRD2 DRD3 EGFR ESR1 ESR2 F10 F2 FGFR1 GBA HMGCR HSD11B1 HSP90AA1 IGF1R JAK2 KDR "
    "KIT LCK MAOB MAP2K1 MAPK1 MAPK14 MAPKAPK2 MET MMP13 NOS1 NR3C1 PARP1 PDE5A PGR PLK1 PPARA "
    "PPARD PPARG PTGS2 PTK2 PTPN1 REN ROCK1 SRC THRB".split()
)


@dataclasses.dataclass(frozen=True)
class Task:
    """An on-target and its off-targets (names, or `TargetSpec` pockets), plus references."""

    name: str
    on: "str | TargetSpec"
    off: "tuple[str | TargetSpec, ...]"
    reference_smiles: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.off:
            raise ValueError(f"task {self.name!r} needs at least one off-target.")

    @property
    def targets(self) -> "tuple[str | TargetSpec, ...]":
        """On-target first, then the off-targets: the column order of the score matrix."""
        return (self.on, *self.off)


def offline_tasks() -> dict[str, Task]:
    """T1 analogues built from the dockstring pockets and the ``safety_mini_panel``.

    These are jaxgen choices (homologous pairs), not the paper's case studies; the
    mini panel is dockstring's intersection with the Bowes et al. (2012) panel plus two CYPs,
    never "the" safety panel.
    """
    pairs = {
        "DRD3_vs_DRD2": ("DRD3", ("DRD2",)),
        "ESR2_vs_ESR1": ("ESR2", ("ESR1",)),
        "ADRB1_vs_ADRB2": ("ADRB1", ("ADRB2",)),
        "ADRB2_vs_ADRB1": ("ADRB2", ("ADRB1",)),
        "PPARG_vs_PPARA_PPARD": ("PPARG", ("PPARA", "PPARD")),
        "AKT1_vs_AKT2": ("AKT1", ("AKT2",)),
        "F10_vs_F2": ("F10", ("F2",)),
        "MAPK14_vs_MAPK1": ("MAPK14", ("MAPK1",)),
        "JAK2_vs_kinases": ("JAK2", ("ABL1", "SRC", "LCK", "KIT", "KDR")),
        "AR_vs_PGR_NR3C1": ("AR", ("PGR", "NR3C1")),
        "CDK2_vs_MAPK1_SRC": ("CDK2", ("MAPK1", "SRC")),
        "MET_vs_kinases": ("MET", ("ABL1", "KDR", "EGFR")),
    }
    tasks = {name: Task(name, on, off) for name, (on, off) in pairs.items()}
    panel = (
        "ADORA2A",
        "ADRB1",
        "ADRB2",
        "DRD2",
        "ACHE",
        "PTGS2",
        "LCK",
        "AR",
        "NR3C1",
        "CYP3A4",
        "CYP2C9",
    )
    # A panel task scores a molecule generated for any target against the panel: the on-target
    # is given by the user (`Task(name, on, panel_off_targets())`); DRD2 is the default example.
    tasks["safety_mini_panel"] = Task(
        "safety_mini_panel", "DRD2", tuple(t for t in panel if t != "DRD2")
    )
    return tasks


def load_task_manifest(path: str) -> dict[str, Task]:
    """Tasks from a JSON manifest of user structures (paths relative to the manifest).

    Format: ``{"tasks": [{"name": ..., "on": TARGET, "off": [TARGET, ...],
    "reference_smiles": [...]}]}`` where TARGET is a dockstring name or
    ``{"name", "receptor", "center": [x, y, z], "size": [x, y, z]}``.
    """
    if not os.path.isfile(path):
        raise StructureDataUnavailableError(f"task manifest {path!r} not found.")
    base = os.path.dirname(os.path.abspath(path))
    with open(path) as f:
        data = json.load(f)

    def target(entry: Any) -> "str | TargetSpec":
        if isinstance(entry, str):
            return entry
        spec = TargetSpec(
            entry["name"],
            os.path.join(base, entry["receptor"]),
            tuple(float(v) for v in entry["center"]),  # type: ignore[arg-type]
            tuple(float(v) for v in entry["size"]),  # type: ignore[arg-type]
        )
        spec.check_files()
        return spec

    tasks = {}
    for t in data.get("tasks", []):
        task = Task(
            t["name"],
            target(t["on"]),
            tuple(target(o) for o in t["off"]),
            tuple(t.get("reference_smiles", ())),
        )
        tasks[task.name] = task
    if not tasks:
        raise ValueError(f"task manifest {path!r} lists no task.")
    return tasks


class ScoreTable(NamedTuple):
    """Scores of ligands at targets: ``scores (n, t)`` float64 with NaN for failures, ``valid``
    bool, ``reasons[i][k]`` the failure reason (None on success), ligand ids, target names, and
    back-end metadata (versions, settings).
    """

    scores: np.ndarray
    valid: np.ndarray
    reasons: list[list[str | None]]
    ligand_ids: list[str]
    target_names: list[str]
    meta: dict[str, Any]


def _target_name(t: "str | TargetSpec") -> str:
    return t if isinstance(t, str) else t.name


class AbstractScoringBackend(abc.ABC):
    """Fills a score matrix: ``score(ligands, targets, *, seed=0) -> ScoreTable``."""

    @abc.abstractmethod
    def score(
        self, ligands: Sequence[Any], targets: "Sequence[str | TargetSpec]", *, seed: int = 0
    ) -> ScoreTable:
        """Energies (lower = better) of every ligand at every target."""


class SurrogateBackend(AbstractScoringBackend):
    """Offline oracle for vector "molecules": ``-(offset + a_k(x)) + noise_sd * eps``.

    ``landscapes`` maps a target name to an affinity function of one sample (higher = better),
    e.g. the `WellLandscape` of `SelectToy`. Always available.
    """

    def __init__(
        self,
        landscapes: Mapping[str, Callable[[jax.Array], jax.Array]],
        *,
        offset: float = 5.0,
        noise_sd: float = 0.5,
    ):
        if not landscapes:
            raise ValueError("`landscapes` must name at least one target.")
        check_nonnegative(noise_sd, "noise_sd")  # numbers: raise now (NaN included)
        check_finite(offset, "offset")
        self.landscapes = dict(landscapes)
        self.offset, self.noise_sd = float(offset), float(noise_sd)

    def score(self, ligands, targets, *, seed=0):
        """Score an array of molecules ``(n, dim)`` at the named targets."""
        x = jnp.asarray(ligands)
        names = [_target_name(t) for t in targets]
        unknown = [n for n in names if n not in self.landscapes]
        if unknown:
            raise ValueError(f"unknown targets {unknown}; known: {sorted(self.landscapes)}.")
        a = jnp.stack([jax.vmap(self.landscapes[n])(x) for n in names], axis=1)
        noise = jr.normal(jr.key(seed), a.shape, a.dtype)
        scores = np.asarray(-(self.offset + a) + self.noise_sd * noise, dtype=np.float64)
        valid = np.isfinite(scores)
        reasons = [[None if ok else "non-finite surrogate score" for ok in row] for row in valid]
        return ScoreTable(
            scores,
            valid,
            reasons,
            [str(i) for i in range(len(scores))],
            names,
            {"backend": "surrogate", "noise_sd": self.noise_sd, "seed": seed},
        )


class _CachedBackend(AbstractScoringBackend):
    """Shared per-(ligand, target) loop with a JSON-lines result cache and per-entry failures."""

    name = "abstract"

    def __init__(self, cache_dir: str | None = None):
        self.cache_dir = cache_dir
        self._cache: dict[str, tuple[float, str | None]] = {}
        if cache_dir is not None:
            os.makedirs(cache_dir, exist_ok=True)
            path = os.path.join(cache_dir, f"{self.name}.jsonl")
            if os.path.isfile(path):
                with open(path) as f:
                    for line in f:
                        rec = json.loads(line)
                        self._cache[rec["key"]] = (rec["score"], rec["reason"])

    def _settings(self) -> dict[str, Any]:
        return {}

    def _key(self, smiles: str, target: "str | TargetSpec", seed: int) -> str:
        tgt = target if isinstance(target, str) else dataclasses.asdict(target)
        if isinstance(target, TargetSpec) and os.path.isfile(target.receptor_pdbqt):
            with open(target.receptor_pdbqt, "rb") as f:
                tgt = {**tgt, "sha1": hashlib.sha1(f.read()).hexdigest()}
        blob = json.dumps([smiles, tgt, seed, self.name, self._settings()], sort_keys=True)
        return hashlib.sha1(blob.encode()).hexdigest()

    @abc.abstractmethod
    def _dock_one(self, smiles: str, target: "str | TargetSpec", seed: int) -> float:
        """Dock one ligand at one target; raise on failure (the loop records NaN + reason)."""

    def score(self, ligands, targets, *, seed=0):
        """Dock every SMILES at every target (failures: NaN and a reason, never an exception)."""
        ligands = [str(s) for s in ligands]
        scores = np.full((len(ligands), len(targets)), np.nan)
        reasons: list[list[str | None]] = [[None] * len(targets) for _ in ligands]
        for i, smi in enumerate(ligands):
            for k, tgt in enumerate(targets):
                key = self._key(smi, tgt, seed)
                if key not in self._cache:
                    try:
                        result: tuple[float, str | None] = (
                            float(self._dock_one(smi, tgt, seed)),
                            None,
                        )
                    except Exception as e:  # noqa: BLE001 - a failed docking is data, not a crash
                        result = (float("nan"), f"{type(e).__name__}: {e}"[:300])
                    self._cache[key] = result
                    if self.cache_dir is not None:
                        with open(os.path.join(self.cache_dir, f"{self.name}.jsonl"), "a") as f:
                            f.write(
                                json.dumps({"key": key, "score": result[0], "reason": result[1]})
                                + "\n"
                            )
                scores[i, k], reasons[i][k] = self._cache[key]
        valid = np.isfinite(scores)
        return ScoreTable(
            scores,
            valid,
            reasons,
            ligands,
            [_target_name(t) for t in targets],
            {"backend": self.name, "seed": seed, **self._settings()},
        )


class VinaBackend(_CachedBackend):
    """AutoDock Vina 1.2 (python ``vina``) after RDKit embedding and meeko preparation.

    Recipe: AddHs, ETKDG embed (seeded), MMFF, meeko PDBQT, ``Vina(sf_name="vina")``,
    maps over the target's box, ``dock(exhaustiveness)``, best energy.
    """

    name = "vina"

    def __init__(self, exhaustiveness: int = 8, n_poses: int = 1, cache_dir: str | None = None):
        # The settings first: a bad one raises even where the docking packages are absent.
        exhaustiveness = check_positive_int(exhaustiveness, "exhaustiveness")
        n_poses = check_positive_int(n_poses, "n_poses")
        self.vina = _require("vina", "vina")
        self.rdkit = _require("rdkit.Chem.AllChem", "vina")
        _require("gemmi", "vina")  # imported by meeko but not declared by it
        self.meeko = _require("meeko", "vina")
        self.exhaustiveness, self.n_poses = exhaustiveness, n_poses
        super().__init__(cache_dir)

    def _settings(self):
        return {
            "exhaustiveness": self.exhaustiveness,
            "vina": getattr(self.vina, "__version__", "?"),
        }

    def _dock_one(self, smiles, target, seed):
        spec = target if isinstance(target, TargetSpec) else TargetSpec.from_dockstring(target)
        spec.check_files()
        chem = self.rdkit
        mol = chem.AddHs(chem.MolFromSmiles(smiles))
        if chem.EmbedMolecule(mol, randomSeed=seed) != 0:
            raise RuntimeError("RDKit could not embed the molecule")
        chem.MMFFOptimizeMolecule(mol)
        setup = self.meeko.MoleculePreparation().prepare(mol)[0]
        pdbqt, ok, err = self.meeko.PDBQTWriterLegacy.write_string(setup)
        if not ok:
            raise RuntimeError(f"meeko could not write the ligand: {err}")
        v = self.vina.Vina(sf_name="vina", cpu=1, seed=seed, verbosity=0)
        v.set_receptor(spec.receptor_pdbqt)
        v.set_ligand_from_string(pdbqt)
        v.compute_vina_maps(center=list(spec.center), box_size=list(spec.size))
        v.dock(exhaustiveness=self.exhaustiveness, n_poses=self.n_poses)
        return float(v.energies(n_poses=1)[0][0])


class DockstringBackend(_CachedBackend):
    """dockstring's own pipeline (its Vina 1.1.2 binary and pockets); needs ``obabel``."""

    name = "dockstring"

    def __init__(self, cache_dir: str | None = None):
        self.dockstring = _require("dockstring", "dockstring")
        if shutil.which("obabel") is None:
            raise BackendUnavailableError(
                "the dockstring back-end needs Open Babel: install it so that `obabel` is on "
                "PATH (Debian: apt-get install openbabel)."
            )
        super().__init__(cache_dir)

    def _dock_one(self, smiles, target, seed):
        name = _target_name(target)
        score, _ = self.dockstring.load_target(name).dock(smiles, seed=seed)
        return float(score)


class PoseScoreBackend(_CachedBackend):
    """Scores user-supplied poses (PDBQT strings) in the on-target frame with Vina.

    ``mode="score_only"`` scores the pose as given, ``"local_only"`` after a local optimisation.
    Off-targets need re-docking (a pose lives in its own pocket's frame): use `VinaBackend`.
    """

    name = "pose_score"

    def __init__(self, mode: str = "score_only", cache_dir: str | None = None):
        if mode not in ("score_only", "local_only"):
            raise ValueError(f"`mode` must be 'score_only' or 'local_only', got {mode!r}.")
        self.vina = _require("vina", "pose_score")
        self.mode = mode
        super().__init__(cache_dir)

    def _settings(self):
        return {"mode": self.mode}

    def _dock_one(self, pose_pdbqt, target, seed):
        spec = target if isinstance(target, TargetSpec) else TargetSpec.from_dockstring(target)
        spec.check_files()
        v = self.vina.Vina(sf_name="vina", cpu=1, seed=seed, verbosity=0)
        v.set_receptor(spec.receptor_pdbqt)
        v.set_ligand_from_string(pose_pdbqt)
        v.compute_vina_maps(center=list(spec.center), box_size=list(spec.size))
        energies = v.score() if self.mode == "score_only" else v.optimize()
        return float(energies[0])


def available_backends() -> dict[str, bool | str]:
    """Which back-ends can be built here: ``True`` or the reason they cannot."""
    out: dict[str, bool | str] = {"surrogate": True}
    for name, cls in (
        ("vina", VinaBackend),
        ("dockstring", DockstringBackend),
        ("pose_score", PoseScoreBackend),
    ):
        try:
            cls()
            out[name] = True
        except BackendUnavailableError as e:
            out[name] = str(e)
    return out


def evaluate_samples(
    samples: Mapping[str, Any],
    tasks: Mapping[str, Task],
    backend: AbstractScoringBackend,
    *,
    seed: int = 0,
    **summary_kwargs: Any,
) -> dict[str, dict[str, Any]]:
    """Score user-supplied model outputs per task and summarise every metric.

    Args:
        samples: task name -> the molecules generated for its on-target (SMILES for docking
            back-ends, arrays for the surrogate).
        tasks: task name -> `Task`.
        backend: a scoring back-end.
        seed: docking seed.
        summary_kwargs: thresholds passed to `summarize`.

    Returns:
        task name -> `summarize` dict, plus ``"scores"`` (the `ScoreTable`).
    """
    missing = [name for name in samples if name not in tasks]
    if missing:
        raise ValueError(f"samples for unknown tasks {missing}; known: {sorted(tasks)}.")
    out = {}
    for name, ligands in samples.items():
        table = backend.score(ligands, tasks[name].targets, seed=seed)
        summary = summarize(jnp.asarray(table.scores), jnp.asarray(table.valid), **summary_kwargs)
        out[name] = {**summary, "scores": table}
    return out
