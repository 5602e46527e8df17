"""The reference the workbench is checked against: onnxruntime.

``onnx.reference.ReferenceEvaluator`` is the fallback for models
onnxruntime refuses (newer opsets); the result says which one ran.
"""
import numpy as np
import onnx

from workbench.errors import CheckFailed


def run_reference(model: onnx.ModelProto, inputs: dict, threads: int = 2):
    """Run ``model`` on ``inputs``; return (outputs by name, runtime name)."""
    try:
        import onnxruntime as ort
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 4  # its errors come back as the exception; no stderr lines
        sess = ort.InferenceSession(model.SerializeToString(), opts,
                                    providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]
        return dict(zip(names, sess.run(names, inputs))), "onnxruntime"
    except Exception as ort_error:
        try:
            from onnx.reference import ReferenceEvaluator
            ref = ReferenceEvaluator(model)
            names = [o.name for o in model.graph.output]
            return dict(zip(names, ref.run(None, inputs))), "onnx.reference"
        except Exception:
            raise CheckFailed(f"the reference runtime cannot run this model: "
                              f"{str(ort_error).splitlines()[0][:300]}") from None


def random_inputs(infos, seed: int = 0) -> dict:
    """Seeded inputs: floats N(0,1), integers in [0, 2), booleans at random."""
    rng = np.random.default_rng(seed)
    out = {}
    for info in infos:
        dtype = np.dtype(info.dtype)
        if dtype.kind == "f":
            value = rng.standard_normal(info.shape).astype(dtype)
        elif dtype.kind == "b":
            value = rng.integers(0, 2, info.shape).astype(bool)
        else:
            value = rng.integers(0, 2, info.shape).astype(dtype)
        out[info.onnx_name] = np.asarray(value)
    return out
