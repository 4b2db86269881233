"""The margin a plan keeps below the card and the node: the one number the verdict, the fixes and the
rendering share (a module of its own so that `plan`, `fixes` and `render` import it, not each other).

A plan fits when its peak is at most 95% of the card (5% kept for what no model predicts: NCCL buffers
that grow with the communicator, cuDNN/cuBLAS workspaces per stream, sequence-length outliers); host
RAM likewise at most 95% of the node.
"""

from __future__ import annotations

HEADROOM = 0.05


def usable(total_gib: float) -> float:
    """What a plan may use of `total_gib` (a card's memory or a node's RAM)."""
    return total_gib * (1 - HEADROOM)
