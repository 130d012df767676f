"""Pure metrics between distributions and samples."""

from ._distances import (
    empirical_gaussian_w2 as empirical_gaussian_w2,
)
from ._distances import (
    energy_distance as energy_distance,
)
from ._distances import (
    gaussian_w2 as gaussian_w2,
)
from ._distances import (
    mmd_unbiased as mmd_unbiased,
)
from ._distances import (
    sliced_w2 as sliced_w2,
)
from ._distances import (
    w1_1d as w1_1d,
)
