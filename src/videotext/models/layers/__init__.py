"""Building blocks shared by the methods (space-time block, attention, pooling)."""
from videotext.models.layers.pooling import POOLING, masked_pool

__all__ = ["POOLING", "masked_pool"]
