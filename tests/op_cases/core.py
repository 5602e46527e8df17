"""Cases for the ops the bundled models need (element-wise, linalg, movement)."""
import numpy as np

from op_cases.base import C, Case, ints, pos, rand, unary  # noqa: F401

CASES = {
}
