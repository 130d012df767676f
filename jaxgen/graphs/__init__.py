"""Graphon and stochastic-block-model estimation by semi-relaxed Gromov-Wasserstein, the test
graphons and samplers, baselines (USVT, sorting-and-smoothing, network histogram) and metrics.
"""

from ._baselines import (
    network_histogram as network_histogram,
    sas as sas,
    tv_denoise as tv_denoise,
    usvt as usvt,
)
from ._estimate import (
    GraphonEstimate as GraphonEstimate,
    check_adjacency as check_adjacency,
    estimate_graphon as estimate_graphon,
    init_coupling as init_coupling,
    kmeans as kmeans,
    objective_of_labels as objective_of_labels,
)
from ._metrics import (
    adjusted_rand_index as adjusted_rand_index,
    graphon_l2_sorted as graphon_l2_sorted,
    hold_out_pairs as hold_out_pairs,
    link_auc as link_auc,
    node_mse as node_mse,
)
from ._sample import (
    GRAPHONS as GRAPHONS,
    graphon as graphon,
    graphon_grid as graphon_grid,
    sample_graphon as sample_graphon,
    sample_sbm as sample_sbm,
)
