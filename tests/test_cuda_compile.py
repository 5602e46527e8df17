"""CUDA code generation and compilation (not execution) of the bundled models.

There is no GPU on the build machines; nvcc (CUDA 13) is. The test skips,
saying why, only where nvcc itself is missing. Each case is a real nvcc
build (~10-40 s on 2 loaded cores): the four models as imported, and the
``auto`` recipe on the two convolution models, whose fused epilogues and
GEMM-shaped convolutions are GPU code the plain imports do not make.
"""
import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import workbench
from workbench.analysis import onnx_nodes
from workbench.build import compile_sdfg, session_build_folder

if not shutil.which("nvcc"):
    pytest.skip("nvcc is not installed: CUDA programs cannot be compiled here",
                allow_module_level=True)

from workbench.build.cuda import compile_cuda  # noqa: E402

# mbconv as imported goes through the command line's export (test below)
# Each nvcc build takes 20-30 s: `make test` compiles the cases that cover the most
# kinds of GPU code (cuBLAS GEMMs and fused epilogues: bert-layer; convolutions as
# GEMMs and shifted GEMMs: resblock after auto; direct and depthwise convolutions:
# the mbconv export below); `make test-slow` compiles the others too.
_SLOW = pytest.mark.slow
CASES = [pytest.param("mlp", None, marks=_SLOW), ("bert-layer", None),
         pytest.param("resblock", None, marks=_SLOW), pytest.param("mbconv", "auto", marks=_SLOW),
         ("resblock", "auto")]


@pytest.mark.parametrize("model,recipe", CASES)
def test_generates_and_compiles_cuda(model, recipe):
    ws = workbench.open(model)
    gemms = any(n.op_type in ("MatMul", "Gemm") for n, _ in onnx_nodes(ws.sdfg))
    if recipe:
        ws.optimize(recipe)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # DaCe's default-block-size notes, one per map
        build = compile_sdfg(ws.sdfg, session_build_folder(f"{ws.build_slot}-gpu"), target="gpu")
    cuda = "\n".join(p.read_text() for p in (build.folder / "src" / "cuda").glob("*.cu"))
    assert "__global__" in cuda
    if gemms:
        assert "cublas" in cuda.lower()
    library = compile_cuda(build, "sm_80")
    assert library.is_file() and library.stat().st_size > 0
    assert build.arch == "80"
    flags = (build.folder / "build" / "compile_commands.json").read_text()
    assert "sm_80" in flags and "--use_fast_math" not in flags


def test_padded_convolution_input_lives_on_the_gpu():
    """The root cause of the conv models' failure: the padded copy of a Conv input
    was a CPU_Heap array written inside GPU kernels ('IllegalCopy' in codegen)."""
    import dace
    ws = workbench.open("resblock")  # 3x3 convolutions with padding
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        build = compile_sdfg(ws.sdfg, session_build_folder(f"{ws.build_slot}-gpu"), target="gpu")
    padded = {name: desc.storage for sdfg in build.sdfg.all_sdfgs_recursive()
              for name, desc in sdfg.arrays.items() if "_padded" in name}
    assert padded and set(padded.values()) == {dace.StorageType.GPU_Global}, padded


def test_optimize_exports_compiled_cuda_program(tmp_path):
    """``app.py optimize mbconv --target gpu -o FOLDER``, as a user runs it."""
    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "mbconv-gpu"
    proc = subprocess.run([sys.executable, str(root / "app.py"), "--quiet", "optimize", "mbconv",
                           "--target", "gpu", "-o", str(out), "--json"], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(root)}, timeout=600)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["target"] == "gpu" and Path(result["folder"]) == out
    assert "__global__" in (out / "src" / "cuda" / "wb_mbconv_cuda.cu").read_text()
    assert (out / "src" / "cpu" / "wb_mbconv.cpp").is_file()
    library = out / "lib" / "libwb_mbconv.so"
    assert library.is_file() and library.stat().st_size > 0
    for name in ("program.sdfgz", "session.sdfgz", "recipe.json", "weights.npz", "README.txt"):
        assert (out / name).is_file(), name


def test_an_operator_output_nothing_reads_still_expands_for_the_gpu(tmp_path):
    """TopK's indices unused: DaCe's GPU transformation, simplifying first, used to drop
    their edge and the operator could not expand (StopIteration). The CUDA code is
    generated and compiled; a recurrent layer is refused by name (no GPU kernels yet)."""
    import onnx
    from onnx import TensorProto, helper
    from workbench.errors import UnsupportedCaseError
    graph = helper.make_graph(
        [helper.make_node("TopK", ["x", "k"], ["values", "indices"], axis=1),
         helper.make_node("Relu", ["values"], ["y"])], "topk_unused",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 3])],
        [helper.make_tensor("k", TensorProto.INT64, [1], [3])])
    path = tmp_path / "topk.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    ws = workbench.open(str(path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        build = compile_sdfg(ws.sdfg, session_build_folder(f"{ws.build_slot}-gpu"), target="gpu")
    assert "__global__" in "\n".join(p.read_text() for p in (build.folder / "src" / "cuda")
                                     .glob("*.cu"))
    assert compile_cuda(build, "sm_80").is_file()

    gru = workbench.open("zoo:gru_classifier")
    with pytest.raises(UnsupportedCaseError, match="no GPU implementation"):
        compile_sdfg(gru.sdfg, session_build_folder(f"{gru.build_slot}-gpu"), target="gpu")


def test_a_training_step_after_auto_compiles_for_the_gpu():
    """A training program's CUDA build: its loss, a reduction over every axis, used to
    be a top-level sequential map reading device memory on the host (no training
    program built for the GPU); after ``auto`` the update is a MultiSweep whose members
    are row kernels, one reading its Q/K/V weight gradient as a column slice."""
    from tests.training_helpers import attention_block
    from workbench.ops.multi_sweep import row_layout
    from workbench.ops.node import OnnxOp
    tr = workbench.open(attention_block()).training(loss="mse", optimizer="adamw")
    tr.optimize("auto")
    sweeps = [(n, st) for n, st in tr.sdfg.all_nodes_recursive()
              if isinstance(n, OnnxOp) and n.op_type == "MultiSweep"]
    assert any(row_layout(tr.sdfg.arrays[e.src.data]) for n, st in sweeps
               for e in st.in_edges(n))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        build = compile_sdfg(tr.sdfg, session_build_folder(f"{tr.build_slot}-gpu"),
                             target="gpu")
    cuda = "\n".join(p.read_text() for p in (build.folder / "src" / "cuda").glob("*.cu"))
    assert "__global__" in cuda and "cublas" in cuda.lower()
    assert compile_cuda(build, "sm_80").is_file()
