"""The DaCe speed patches' old home, kept so that existing imports still work.

Every patch, with its why, now lives in ``workbench.dace_patches``; install
them with ``workbench.dace_patches.install()``.
"""
from workbench.dace_patches import (caller_debuginfo, has_cycles, in_degree,  # noqa: F401
                                    install, node, node_id, out_degree)
