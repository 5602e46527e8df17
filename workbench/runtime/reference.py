"""The reference the workbench is checked against: onnxruntime.

``onnx.reference.ReferenceEvaluator`` is the fallback for models
onnxruntime refuses (newer opsets); the result says which one ran.
"""
import onnx

from workbench.errors import CheckFailed


def run_reference(model: onnx.ModelProto, inputs: dict, threads: int = 2):
    """Run ``model`` on ``inputs``; return (outputs by name, runtime name)."""
    try:
        # its errors come back as the exception; no stderr lines
        sess = ort_session(model, threads, quiet=True)
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


def ort_session(model: onnx.ModelProto, threads: int, quiet: bool = False):
    """The one way the workbench makes an onnxruntime session: CPU only, ``threads``
    intra-op threads, one inter-op thread; ``quiet`` silences its log (errors still raise)."""
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    if quiet:
        opts.log_severity_level = 4
    return ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])


def random_inputs(infos, seed: int = 0) -> dict:
    """Seeded inputs in the model's input order: floats N(0,1), integers in [0, 2),
    booleans at random (exported programs draw the very same: ``seeded_inputs``)."""
    from workbench.export.runner import seeded_inputs
    return seeded_inputs([(i.onnx_name, i.shape, i.dtype) for i in infos], seed)
