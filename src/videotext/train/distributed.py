"""Moved to `videotext.distributed` (a foundation module every layer may import)."""
from videotext.distributed import *  # noqa: F401,F403
from videotext.distributed import all_gather_object, barrier, broadcast_object, init_distributed  # noqa: F401
