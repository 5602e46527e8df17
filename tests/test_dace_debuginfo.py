"""Nodes DaCe adds still carry their caller's file and line (found without inspect.stack)."""
import inspect

import dace

from workbench import dace_debuginfo


def _sdfg():
    sdfg = dace.SDFG("debuginfo")
    sdfg.add_array("A", [4], dace.float32)
    sdfg.add_array("B", [4], dace.float32)
    return sdfg, sdfg.add_state()


def test_a_new_node_names_the_line_that_added_it():
    dace_debuginfo.install()
    sdfg, state = _sdfg()
    line = inspect.currentframe().f_lineno + 1
    node = state.add_access("A")
    assert (node.debuginfo.filename, node.debuginfo.start_line) == (__file__, line)
    line = inspect.currentframe().f_lineno + 1
    _, entry, _ = state.add_mapped_tasklet("t", {"i": "0:4"}, {"a": dace.Memlet("A[i]")}, "b = a",
                                           {"b": dace.Memlet("B[i]")}, external_edges=True)
    assert (entry.debuginfo.filename, entry.debuginfo.start_line) == (__file__, line)


def test_given_debug_info_wins():
    dace_debuginfo.install()
    _, state = _sdfg()
    given = dace.dtypes.DebugInfo(7, 0, 7, 0, "model.onnx")
    assert state.add_access("A", debuginfo=given).debuginfo is given
