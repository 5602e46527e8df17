"""Exporting a session as a program that runs without the workbench.

The folder holds: program.sdfgz (the optimized, expanded SDFG: plain DaCe),
session.sdfgz (the session's SDFG with its ONNX operators), recipe.json and
script.py (the steps), src/ (generated sources), lib/ (the compiled library,
CPU), weights.npz, program.json (argument order, shapes, dtypes), run.py (a
numpy + ctypes runner), inputs.npz (the seeded inputs), expected.npz
(onnxruntime's outputs on them) and README.txt. CPU exports are run in a fresh process and compared
with onnxruntime before ``export`` returns.
"""
import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

from workbench.analysis.memory import init_sized
from workbench.ops.registry import is_row_major
from workbench.errors import BadInputError, BuildError, CheckFailed
from workbench.session.folder import atomic_write
from workbench.runtime.reference import run_reference

SEED = 0


def export_session(ws, folder, target: str = "cpu") -> dict:
    if getattr(ws.model, "counts", None):   # its runner would return the bound, not the count
        raise BadInputError(f"an export does not read the counts of sizes the data decide "
                            f"({', '.join(ws.model.counts)}; importer/counted.py) yet; run "
                            f"the program in the workbench.")
    if ws.model.symbols and target != "cpu":
        raise BadInputError(f"a GPU export runs at one size; open the model with "
                            f"{', '.join(ws.model.symbols)} fixed (--shape NAME=SIZE, without "
                            f"--symbolic) to export it for the GPU.")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    build = ws.build(target=target, whole=True)   # one program, not units calling units
    _write_json_gz(folder / "session.sdfgz", ws.sdfg.to_json())
    _write_json_gz(folder / "program.sdfgz", build.sdfg.to_json())
    ws.save_recipe(folder / "recipe.json")
    ws.save_script(folder / "script.py")
    if (folder / "src").exists():
        shutil.rmtree(folder / "src")
    shutil.copytree(build.folder / "src", folder / "src")
    np.savez(folder / "weights.npz", **ws.model.weights)
    readme = [f"{ws.name}: exported by DaCe Workbench ({len(ws.history)} transformation steps, "
              f"target {target}).", ""]
    result = {"folder": str(folder), "target": target}
    if target == "cpu":
        library = next(p for p in (build.folder / "build").glob(f"lib{build.sdfg.name}.so"))
        (folder / "lib").mkdir(exist_ok=True)
        shutil.copy2(library, folder / "lib" / library.name)
        spec = _program_spec(ws, build, library.name)
        spec["dependencies"] = _copy_kernel_libraries(build, folder / "lib")
        if hasattr(ws, "training_spec"):   # a training program: run.py --steps takes steps
            spec["training"] = ws.training_spec()
            np.savez(folder / "state.npz", **ws.state)
        atomic_write(folder / "program.json", json.dumps(spec, indent=1).encode())
        shutil.copy2(Path(__file__).with_name("runner.py"), folder / "run.py")
        inputs = ws.random_inputs(SEED)
        reference, _ = run_reference(ws.model.reference_model, ws.reference_feeds(inputs))
        np.savez(folder / "inputs.npz", **inputs)
        np.savez(folder / "expected.npz", **reference)
        readme += ["Run it (numpy is the only Python dependency; the library needs libgomp and",
                   "the BLAS it was built with):", "",
                   "    python run.py                       # seeded random inputs",
                   "    python run.py --inputs in.npz --out out.npz",
                   "    python run.py --check               # compare with expected.npz", ""]
        if ws.model.symbols:
            sizes = ",".join(f"{k}={v}" for k, v in ws.model.symbols.items())
            readme += ["One program for every size of " + ", ".join(ws.model.symbols) + ": the",
                       "sizes are read from the inputs' shapes; random inputs are made at",
                       f"{sizes} unless --sizes says otherwise (python run.py --sizes {sizes}).",
                       ""]
        readme += ["in.npz/out.npz are keyed by the model's ONNX input/output names: "
                   + ", ".join(i.onnx_name for i in ws.inputs) + " / "
                   + ", ".join(o.onnx_name for o in ws.outputs) + "."]
        result["check"] = _check(folder)
    else:
        from workbench.build.cuda import compile_cuda
        library = compile_cuda(build)
        (folder / "lib").mkdir(exist_ok=True)
        shutil.copy2(library, folder / "lib" / library.name)
        readme += ["GPU export: src/ holds the generated C++/CUDA sources (src/cpu, src/cuda),",
                   f"lib/{library.name} the library compiled for CUDA, program.sdfgz the SDFG.",
                   "It was compiled, not run, unless a GPU was at hand (see the README)."]
    readme += ["", "recipe.json / script.py replay the steps on the original model with the",
               "workbench (python script.py)."]
    atomic_write(folder / "README.txt", ("\n".join(readme) + "\n").encode())
    return result


def _copy_kernel_libraries(build, lib: Path) -> list:
    """Copy the oneDNN shim and oneDNN into ``lib`` when the program calls them; their
    file names in load order (run.py loads them before the program)."""
    from workbench.build import onednn
    sources = (build.folder / "src").rglob("*.cpp")
    if not any("wb_dnnl_" in p.read_text(errors="replace") for p in sources):
        return []
    shim = onednn.shim()
    names = []
    for path in (onednn.library_file(), shim):
        shutil.copy2(path, lib / path.name)
        names.append(path.name)
    return names


def _program_spec(ws, build, library_name) -> dict:
    from workbench.importer.symbolic import shape_json, user_name
    roles = {i.sdfg_name: ("input", i) for i in ws.inputs}
    roles.update({o.sdfg_name: ("output", o) for o in ws.outputs})
    roles.update({s: ("symbol", None) for s in build.sdfg.free_symbols})
    args = []
    for name, desc in build.sdfg.arglist().items():
        role, info = roles.get(name, ("weight", None))
        if role == "weight" and name not in ws.model.weights:
            raise BuildError(f"exported program takes '{name}', which is neither an input, an "
                             f"output nor a weight; it cannot run standalone.")
        args.append({"name": user_name(name) if role == "symbol" else name, "role": role,
                     "shape": shape_json(desc.shape),
                     "dtype": np.dtype(desc.dtype.as_numpy_dtype()).name,
                     "onnx_name": info.onnx_name if info else name,
                     "onnx_shape": shape_json(info.shape) if info else None})
        if not is_row_major(desc):   # a cache with room to grow (CacheInPlace)
            args[-1].update(strides=shape_json(desc.strides),
                            total_size=shape_json([desc.total_size])[0])
    from workbench.runtime.verify import (DEFAULT_ATOL, DEFAULT_RTOL, HALF_ATOL, HALF_RTOL,
                                          STEP_SLACK, quantization_steps)
    inputs = [{"onnx_name": i.onnx_name, "onnx_shape": shape_json(i.shape),
               "dtype": np.dtype(i.dtype).name} for i in ws.inputs]  # the model's input order
    init = build.sdfg.init_signature(for_call=True)
    return {"name": build.sdfg.name, "library": library_name, "arguments": args, "inputs": inputs,
            # symbolic sizes: their values at export (random inputs' default) and the ones
            # the library's init takes, in order
            "symbols": dict(ws.model.symbols or {}),
            "init_symbols": [user_name(s.strip()) for s in init.split(",") if s.strip()],
            "init_sized": init_sized(build.sdfg),
            "seed": SEED, "rtol": DEFAULT_RTOL, "atol": DEFAULT_ATOL,
            "half_rtol": max(DEFAULT_RTOL, HALF_RTOL), "half_atol": max(DEFAULT_ATOL, HALF_ATOL),
            "steps": {name: step * STEP_SLACK for name, step
                      in quantization_steps(ws.model.reference_model).items()}}


def _check(folder: Path) -> dict:
    proc = subprocess.run([sys.executable, "run.py", "--check"], cwd=folder, capture_output=True,
                          text=True, timeout=600)
    if proc.returncode != 0:
        raise CheckFailed(f"the exported program in '{folder}' does not match onnxruntime: "
                          f"{(proc.stdout + proc.stderr).strip()[-500:]}")
    return {"match": True, "output": proc.stdout.strip()}


def _write_json_gz(path, obj) -> None:
    atomic_write(path, gzip.compress(json.dumps(obj).encode(), compresslevel=5))
