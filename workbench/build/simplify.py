"""DaCe's simplify pipeline, as the build runs it, and the two DaCe 1.0.2 bugs it avoids.

1. Multi-state inlining splits the state around the nested SDFG and copies
   the access nodes cut by the split; a View's copy loses the edge to the
   data it views, which leaves an invalid SDFG. The layout transformations
   make Views (reshapes and slices without copies), and so does inlining an
   operator that sees a tensor in another shape (batched MatMul at batch > 1,
   SqueezeNet's Concat), before a neighbour's split. So multi-state inlining
   is off when the program has, or inlining makes, Views.
2. Array elimination (its redundant-array and redundant-slice rewrites)
   composes a View's subset with the memlet through it and can fail midway
   with "Dimension mismatch in composition" (seen on the full-size ViT-tiny
   after ``auto``, where buffers are shared and operators stay whole around
   Views). The program is half-rewritten by then, so the build expands the
   operators again and simplifies without that pass: the program keeps a few
   copies and Views it could have lost, never a wrong one.
3. Dead dataflow elimination, removing a dead node whose producer is a C++
   tasklet reached through an empty edge, asks for the type of connector
   None and raises "Cannot eliminate dead connector" (the node-suite's
   float16 attention bodies, whose Casts are C++). The build then does the
   same as for rule 2 without that pass: the program computes a value
   nobody reads, never a wrong one.
"""
import traceback

import dace

# The passes a build can do without (rules 2 and 3): where they and the rewrites they
# apply live in DaCe.
SKIPPABLE = {"ArrayElimination": ("passes/array_elimination.py", "dataflow/redundant_array.py"),
             "DeadDataflowElimination": ("passes/dead_dataflow_elimination.py",)}


def simplify_program(program: dace.SDFG, skip=frozenset()) -> None:
    """DaCe's simplify on ``program`` (in place), with rule 1; without the passes named in
    ``skip`` (rules 2 and 3)."""
    from dace.transformation.passes.fusion_inline import InlineSDFGs
    from dace.transformation.passes.simplify import SimplifyPass
    simplifier = SimplifyPass(validate=True, skip=set(skip) or None)
    if any(isinstance(desc, dace.data.View) for desc in program.arrays.values()) or \
            _inlining_makes_views(program):
        for step in simplifier.passes:
            if isinstance(step, InlineSDFGs):
                step.multistate = False
    simplifier.apply_pass(program, {})


def failed_pass(error: BaseException):
    """The pass of ``SKIPPABLE`` that ``error`` was raised inside, or None."""
    files = [f.filename.replace("\\", "/") for f in traceback.extract_tb(error.__traceback__)]
    return next((name for name, where in SKIPPABLE.items()
                 if any(f.endswith(where) for f in files)), None)


def _inlining_makes_views(program: dace.SDFG) -> bool:
    """Whether inlining a nested SDFG will turn one of its arrays into a View.

    DaCe's InlineSDFG reshapes (adds a View for) an array whose rank exceeds
    the outer memlet's, or whose strides do not match it; the same test here.
    """
    from dace.transformation.interstate import InlineSDFG
    for node, state in program.all_nodes_recursive():
        if not isinstance(node, dace.nodes.NestedSDFG):
            continue
        for edge in [*state.in_edges(node), *state.out_edges(node)]:
            inner = node.sdfg.arrays.get(edge.dst_conn if edge.dst is node else edge.src_conn)
            if inner is None or edge.data.data is None:
                continue
            outer = state.sdfg.arrays[edge.data.data]
            if len(inner.shape) > len(edge.data.subset) or not InlineSDFG._check_strides(
                    inner.strides, outer.strides, edge.data, node):
                return True
    return False
