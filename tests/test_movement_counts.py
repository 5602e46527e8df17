"""The data-movement figure counts a range's elements as DaCe does (Python integers where
the bounds are integers, DaCe's sympy formula otherwise)."""
import random

import dace
from dace.subsets import Indices, Range

from workbench.analysis.movement import _elements


def test_integer_ranges_count_as_dace_counts_them():
    rng = random.Random(1)
    for _ in range(3000):
        dims = [(rng.randint(-5, 20), rng.randint(-5, 40), rng.choice([1, 2, 3, -1, -2, 5]))
                for _ in range(rng.randint(1, 4))]
        subset = Range(dims)
        if rng.random() < 0.3:
            subset.tile_sizes = [rng.randint(1, 4) for _ in dims]
        assert _elements(subset) == int(subset.num_elements()), dims


def test_symbolic_ranges_and_indices_keep_dace_s_answer():
    n = dace.symbol("N")
    subset = Range([(0, n - 1, 1), (0, 3, 1)])
    assert _elements(subset) == subset.num_elements() == 4 * n
    assert _elements(Indices([2, 3])) == 1
