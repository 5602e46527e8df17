"""Layout level: how tensors sit in memory."""
