"""``SparseConvTensor.sparity`` without numpy (group ``mmdet3d.sparse_tensor``).

The stock property divides by ``np.prod(self.spatial_shape)``, which converts the shape list to
an array on every access. Python integers give the same value: both sides divide two integers
below 2**53 in double precision, so the quotient is correctly rounded either way.
"""

from __future__ import annotations

import math


def _sparity(self) -> float:
    # math.prod instead of the seed's three-factor product: same value for the 3-D shapes of
    # spconv, and still right for a tensor of another rank.
    return self.indices.shape[0] / math.prod(self.spatial_shape) / self.batch_size


sparity = property(_sparity, doc="Occupied fraction of the dense volume, per batch element.")
