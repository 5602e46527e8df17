"""Global level: the whole program's memory."""
from transforms.global_ import identity  # noqa: F401
