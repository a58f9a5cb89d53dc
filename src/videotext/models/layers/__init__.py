"""Building blocks shared by the methods (space-time block, attention, pooling)."""
