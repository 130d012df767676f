"""Graphon and stochastic-block-model estimation by semi-relaxed Gromov-Wasserstein, the test
graphons and samplers, baselines (USVT, sorting-and-smoothing, network histogram) and metrics.
"""

from ._baselines import (
    network_histogram as network_histogram,
)
from ._baselines import (
    sas as sas,
)
from ._baselines import (
    tv_denoise as tv_denoise,
)
from ._baselines import (
    usvt as usvt,
)
from ._estimate import (
    GraphonEstimate as GraphonEstimate,
)
from ._estimate import (
    check_adjacency as check_adjacency,
)
from ._estimate import (
    estimate_graphon as estimate_graphon,
)
from ._estimate import (
    init_coupling as init_coupling,
)
from ._estimate import (
    kmeans as kmeans,
)
from ._estimate import (
    objective_of_labels as objective_of_labels,
)
from ._metrics import (
    adjusted_rand_index as adjusted_rand_index,
)
from ._metrics import (
    graphon_l2_sorted as graphon_l2_sorted,
)
from ._metrics import (
    hold_out_pairs as hold_out_pairs,
)
from ._metrics import (
    link_auc as link_auc,
)
from ._metrics import (
    node_mse as node_mse,
)
from ._sample import (
    GRAPHONS as GRAPHONS,
)
from ._sample import (
    graphon as graphon,
)
from ._sample import (
    graphon_grid as graphon_grid,
)
from ._sample import (
    sample_graphon as sample_graphon,
)
from ._sample import (
    sample_sbm as sample_sbm,
)
