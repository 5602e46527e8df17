"""Vectorization: DaCe's, on maps whose vector loads are safe and compile.

Rules (on top of DaCe's: one tasklet in the map, every memlet that uses
the innermost parameter uses it in its contiguous dimension):
1. The tasklet's code is plain arithmetic (``+ - * /``, unary minus,
   names and numbers): DaCe's vector type has no ``max``, ``exp``, ``erf``
   or conditionals.
2. Vectors are 4 floats (16 bytes): DaCe's vector loads are aligned loads,
   and 16 bytes is all the alignment ``new`` guarantees in the C++14 that
   DaCe compiles with (its ``DACE_ALIGN(64)`` needs C++17's aligned new;
   8-float vectors faulted on bert-layer).
3. Every array read or written with a vector is a transient plain array of
   the SDFG that holds the map (allocated by DaCe; a caller's array, even
   contiguous, may start anywhere).
4. Each vector access starts at exactly the innermost parameter, and every
   stride but the contiguous one is a multiple of the vector length, so
   every vector starts on a vector boundary. DaCe adds a scalar loop for a
   remainder when the extent is not a multiple.
5. Every array accessed as a vector holds 4-byte numbers (float32, int32,
   uint32): DaCe's vector.h has no vector of bool or float16 (a bool map in a
   control-flow body failed to compile: ``_vtype<bool, 4>`` is incomplete),
   and 4 wider elements would break rule 2's 16 bytes.
"""
import ast

from dace import data as dt
from dace import dtypes, symbolic
from dace.transformation import dataflow as df

from workbench.transformation_api import DacePattern, register

VECTOR = 4  # floats in 16 bytes (see rule 2)
ELEMENTS = (dtypes.float32, dtypes.int32, dtypes.uint32)   # rule 5
_ARITHMETIC = (ast.Module, ast.Assign, ast.Expr, ast.Name, ast.Load, ast.Store, ast.Constant,
               ast.BinOp, ast.UnaryOp, ast.Add, ast.Sub, ast.Mult, ast.Div, ast.USub, ast.UAdd)


def _arithmetic(code: str) -> bool:
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return False
    return all(isinstance(n, _ARITHMETIC) for n in ast.walk(tree))


def _aligned(sdfg, edge, param) -> bool:
    """Whether a vector access through ``edge`` (if it uses ``param``) is aligned."""
    subset = edge.data.subset
    if edge.data.data is None or param not in map(str, subset.free_symbols):
        return True  # a scalar or broadcast read stays scalar
    desc = sdfg.arrays[edge.data.data]
    if type(desc) is not dt.Array or not desc.transient or desc.strides[-1] != 1 \
            or desc.dtype not in ELEMENTS:
        return False
    begin = subset[len(desc.shape) - 1][0]
    if symbolic.simplify(begin - symbolic.pystr_to_symbolic(param)) != 0:
        return False
    return all(_multiple(stride) for stride in desc.strides[:-1])


def _multiple(stride) -> bool:
    try:
        return int(stride) % VECTOR == 0
    except TypeError:  # symbolic
        return False


def vectorizable(sdfg, state, roles) -> bool:
    entry = roles["map_entry"]
    inner = state.scope_subgraph(entry, include_entry=False, include_exit=False).nodes()
    if len(inner) != 1 or not _arithmetic(inner[0].code.as_string):
        return False
    param = entry.map.params[-1]
    return all(_aligned(sdfg, e, param) for e in state.all_edges(inner[0]))


@register
class Vectorization(DacePattern):
    level = "local"
    name = "Vectorization"
    description = "Vectorize a map's innermost dimension (aligned SIMD loads and stores)"
    pattern = df.Vectorization
    options = {"vector_len": VECTOR}

    def accept(self, sdfg, state, roles):
        return vectorizable(sdfg, state, roles)
