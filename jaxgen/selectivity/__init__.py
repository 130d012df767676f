"""Selectivity of generated molecules: metrics over score matrices, scoring back-ends on offline
pockets, and selectivity guidance for flow generators (SelectBench).
"""

from ._backends import (
    DOCKSTRING_TARGETS as DOCKSTRING_TARGETS,
    AbstractScoringBackend as AbstractScoringBackend,
    BackendUnavailableError as BackendUnavailableError,
    DockstringBackend as DockstringBackend,
    PoseScoreBackend as PoseScoreBackend,
    ScoreTable as ScoreTable,
    StructureDataUnavailableError as StructureDataUnavailableError,
    SurrogateBackend as SurrogateBackend,
    TargetSpec as TargetSpec,
    Task as Task,
    VinaBackend as VinaBackend,
    available_backends as available_backends,
    evaluate_samples as evaluate_samples,
    load_task_manifest as load_task_manifest,
    offline_tasks as offline_tasks,
)
from ._guidance import (
    ClassifierGuidedVelocity as ClassifierGuidedVelocity,
    SelectivityObjective as SelectivityObjective,
)
from ._metrics import (
    bootstrap_ci as bootstrap_ci,
    cross_target_auroc as cross_target_auroc,
    diagonal_dominance as diagonal_dominance,
    hit_frequency as hit_frequency,
    off_aggregate as off_aggregate,
    on_target_rank as on_target_rank,
    panel_hits as panel_hits,
    selective_hit_rate as selective_hit_rate,
    selectivity_gap as selectivity_gap,
    success_rate as success_rate,
    summarize as summarize,
    to_energy as to_energy,
    top1_rate as top1_rate,
    zscore_scores as zscore_scores,
)
from ._toy import SelectToy as SelectToy, WellLandscape as WellLandscape
from ._vinalike import (
    XS_TYPES as XS_TYPES,
    Atoms as Atoms,
    parse_pdbqt as parse_pdbqt,
    vinalike_energy as vinalike_energy,
    vinalike_terms as vinalike_terms,
)
