"""Energy-based models from classifiers (JEM): energies, SGLD with a replay buffer, the mixed
generative-discriminative loss trained through `jaxgen.core.fit`, and model-only proxies of
human-alignment probes.
"""

from ._jem import (
    AbstractClassifier as AbstractClassifier,
    ConvClassifier as ConvClassifier,
    JEMConfig as JEMConfig,
    JEMResult as JEMResult,
    MLPClassifier as MLPClassifier,
    ReplayBuffer as ReplayBuffer,
    energy_joint as energy_joint,
    energy_marginal as energy_marginal,
    fit_jem as fit_jem,
    init_replay_buffer as init_replay_buffer,
    jem_loss as jem_loss,
    sgld as sgld,
)
from ._proxies import (
    cue_conflict_shape_bias as cue_conflict_shape_bias,
    distortion_ordering as distortion_ordering,
    saliency_diagnostic_correlation as saliency_diagnostic_correlation,
)
