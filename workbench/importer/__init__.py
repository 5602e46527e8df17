"""ONNX model -> SDFG with static shapes and weights bound at call time."""
from dataclasses import dataclass, field
from pathlib import Path

import onnx

from workbench.importer.contracts import check_contracts
from workbench.importer.control_flow import settle_control_flow
from workbench.importer.counted import counted_nodes, insert_counts, split_program
from workbench.importer.counted_body import not_a_program, register_refusals
from workbench.importer.data_dependent import bound_data_dependent
from workbench.importer.fold import fold_constants
from workbench.importer.half import compute_half_in_float
from workbench.importer.load import check_model, load_model
from workbench.importer.sequences import (check_tensor_inputs, lower_sequences, lowered_op_types,
                                          needs_lowering)
from workbench.importer.shapes import fix_input_shapes, graph_inputs, infer_shapes, tensor_types
from workbench.importer.to_sdfg import (FOLDED_AT_IMPORT, TensorInfo, build_sdfg, c_identifier,
                                       check_supported)
from workbench.progress import SILENT


@dataclass
class ImportedModel:
    """Everything the session needs from an import."""
    name: str
    sdfg: object
    inputs: list          # TensorInfo per graph input
    outputs: list         # TensorInfo per graph output
    weights: dict         # sdfg array name -> numpy array
    reference_model: onnx.ModelProto  # the user's model with fixed input shapes
    folded_model: onnx.ModelProto     # what the SDFG was built from
    stats: dict = field(default_factory=dict)
    # bounded output -> (count output, axis): keep the first count (importer/data_dependent.py)
    counted: dict = field(default_factory=dict)
    # symbolic dims kept symbolic -> the size runs use unless told (importer/symbolic.py)
    symbols: dict = field(default_factory=dict)
    # symbol sized by run-time data -> the array its count is written to (importer/counted.py)
    counts: dict = field(default_factory=dict)


def import_model(source, input_shapes: dict = None, name: str = None, prefer_blas: bool = None,
                 fold: bool = True, progress=SILENT, memory_budget=None,
                 bounded: bool = False, symbolic=(), unfolded=frozenset(),
                 counting: bool = True) -> ImportedModel:
    """Import an ONNX file path or ``ModelProto`` into an SDFG.

    ``prefer_blas`` (default: when a BLAS library is found) picks the BLAS
    implementation for MatMul/Gemm nodes. ``fold=False`` folds only
    Constant, Shape and Size, so every other node runs as compiled code.
    ``memory_budget`` (bytes or "8G"; default ``$WORKBENCH_MEMORY_BUDGET`` or
    8 GiB) refuses models whose tensors would not fit, before allocating them.
    ``bounded`` gives NonZero/NonMaxSuppression graph outputs whose size the data decides
    an upper bound and a count output (``ImportedModel.counted``); the caller trims.
    ``symbolic`` names symbolic dims of the inputs that stay symbols of the program
    (``importer/symbolic.py``); ``input_shapes`` may give each the size runs use by
    default (else 1). Tensors named in ``unfolded`` are computed by the program, never
    folded into weights. Other NonZero/NonMaxSuppression/Unique nodes of run-time data are
    bounded with a count the program honours (``importer/counted.py``; not with
    ``symbolic``, nor where ``counting`` is false: those are refused by name).
    """
    if symbolic:
        out = _import_symbolic(source, input_shapes, name, prefer_blas, fold, progress,
                               memory_budget, tuple(symbolic))
        register_refusals(out)
        return out
    if prefer_blas is None:
        from workbench.build.settings import blas_implementation
        prefer_blas = blas_implementation() is not None
    with progress.phase("load and check"):
        if isinstance(source, onnx.ModelProto):
            model = source
            check_model(model)
            name = name or (model.graph.name or "model")
        else:
            model = load_model(source, memory_budget)
            name = name or Path(source).stem
    # Fail on unsupported ops before any expensive work.
    check_supported(model, allow=FOLDED_AT_IMPORT | lowered_op_types(model))
    check_tensor_inputs(model)
    fixed = fix_input_shapes(model, input_shapes)
    folded, n_folded, known = settle_shapes(fixed, fold, memory_budget, progress, unfolded)
    folded = compute_half_in_float(folded, tensor_types(folded))
    counted = {}
    if bounded:
        folded, counted = bound_data_dependent(folded, tensor_types(folded))
    if counting and counted_nodes(folded, tensor_types(folded)):
        out = _import_counted(folded, fixed, model, name, prefer_blas, fold, progress,
                              memory_budget, counted)
        register_refusals(out)
        return out
    with progress.phase("build SDFG"):
        sdfg_name = c_identifier(f"wb_{name}", set())
        sdfg, inputs, outputs, weights = build_sdfg(folded, tensor_types(folded), sdfg_name,
                                                    prefer_blas, known)
    stats = {"nodes_in": len(model.graph.node), "nodes_folded": n_folded,
             "nodes": len(folded.graph.node)}
    out = ImportedModel(name, sdfg, inputs, outputs, weights, fixed, folded, stats, counted)
    register_refusals(out)   # counts of 0 inside bodies refused at run time
    return out


def _import_symbolic(source, input_shapes, name, prefer_blas, fold, progress, memory_budget,
                     names, keep_source=False):
    from workbench.importer import size_forms, symbolic
    if not isinstance(source, onnx.ModelProto):
        source = load_model(source, memory_budget)
    declared = {d.dim_param for i in graph_inputs(source)
                for d in i.type.tensor_type.shape.dim if d.HasField("dim_param")}
    unknown = sorted(set(names) - declared)
    if unknown:
        raise symbolic.NotSymbolic(
            f"{', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} not a symbolic "
            f"dimension of the model's inputs; they are {', '.join(sorted(declared)) or 'none'}.")
    given = dict(input_shapes or {})
    defaults = {}
    for n in names:   # a size, or [size] as --shape NAME=SIZE gives it
        size = given.pop(n, 1)
        defaults[n] = int(size[0] if isinstance(size, (list, tuple)) and len(size) == 1
                          else size)
    forms = size_forms.Forms(lambda: fix_input_shapes(source, given, keep=names), names)
    unfolded = frozenset()
    scale, extra, imports = 1, [], []
    while True:   # once more at probes past every stride the model divides its sizes by
        probes = symbolic.probe_sizes(names, scale) + extra
        if len(imports) < len(probes):
            imports, unfolded = _probe_imports(source, given, probes, name, prefer_blas, fold,
                                               progress, memory_budget, imports, unfolded)
        try:
            out = symbolic.generalize(names, probes, imports, forms)
        except size_forms.Ambiguous as e:   # one more probe, where the two forms differ
            if len(extra) >= symbolic.MAX_ROUNDS or e.sizes in probes:
                raise
            extra.append(e.sizes)
            continue
        except symbolic.NotSymbolic:
            if scale > 1 or not forms.used or forms.scale() == 1:
                raise
            scale, extra, imports = forms.scale(), [], []
            continue
        if not forms.used or scale >= forms.scale():
            break
        scale, extra, imports = forms.scale(), [], []
    if keep_source:
        return out
    out.reference_model = fix_input_shapes(source, given, keep=names)
    out.symbols = defaults
    return out


def _probe_imports(source, given, probes, name, prefer_blas, fold, progress, memory_budget,
                   imports=(), unfolded=frozenset()):
    """(one import per probe, the folded tensors the program computes): the ``imports``
    made already are kept; all are made again while folded tensors turn out to depend on
    the size (``symbolic.sized_constants``)."""
    from workbench.importer import symbolic
    imports = list(imports)
    for round_ in range(symbolic.MAX_ROUNDS):
        for sizes in probes[len(imports):]:   # not the program (counted_body rule 4)
            with not_a_program():
                with progress.phase(f"import at "
                                    f"{', '.join(f'{n}={v}' for n, v in sizes.items())}"):
                    imports.append(import_model(source, {**given, **sizes}, name, prefer_blas,
                                                fold, memory_budget=memory_budget,
                                                unfolded=unfolded, counting=False))
        # a folded tensor whose size changes with the symbols is computed by the program
        more = symbolic.sized_constants(imports, source) - unfolded
        if not more or round_ == symbolic.MAX_ROUNDS - 1:
            return imports, unfolded
        unfolded |= more
        imports = []


def _import_counted(folded, fixed, model, name, prefer_blas, fold, progress, memory_budget,
                    counted):
    """The program of ``folded`` with its run-time data-dependent sizes as count symbols
    assigned inside it (``importer/counted.py``)."""
    from workbench.errors import UnsupportedCaseError
    from workbench.importer.symbolic import NotSymbolic
    cut, counts = insert_counts(folded, tensor_types(folded))
    try:
        out = _import_symbolic(cut, {}, name, prefer_blas, fold, progress, memory_budget,
                               tuple(counts), keep_source=True)
    except NotSymbolic as e:   # named by the node whose count it is
        named = list(zip(counted_nodes(folded, tensor_types(folded)), counts))
        node = next((n for n, symbol in named if symbol in str(e)), named[0][0])
        raise UnsupportedCaseError(node.name or node.op_type, node.op_type,
                                   f"its output's size is a count known at run time, and "
                                   f"the nodes after it do not run at every count: {e}") from e
    split_program(out, counts)
    out.reference_model, out.counted = fixed, counted
    out.stats["nodes_in"] = len(model.graph.node)
    return out


def settle_shapes(fixed: onnx.ModelProto, fold: bool = True, memory_budget=None,
                  progress=SILENT, keep=frozenset()):
    """Shape inference and constant folding until nothing more folds, on a model
    whose inputs have static shapes: (folded model, nodes folded, known values)."""
    with progress.phase("shape inference"):
        lowered = lower_sequences(fixed).model if needs_lowering(fixed) else fixed
        inferred = infer_shapes(lowered, memory_budget=memory_budget)
        check_contracts(inferred, tensor_types(inferred))
    with progress.phase("constant folding"):
        shapes = {name: shape for name, (_, shape) in tensor_types(inferred).items()}
        folded, n_folded, known = fold_constants(inferred, shapes, evaluate=fold, keep=keep)
        folded = infer_shapes(folded, known, memory_budget)
        # Folding can make shapes static that inference could not see (a Reshape whose
        # target was computed: legacy ViT exports), and so more Shape nodes foldable.
        while n_folded:
            shapes = {name: shape for name, (_, shape) in tensor_types(folded).items()}
            again, n_more, known_more = fold_constants(folded, shapes, evaluate=fold, keep=keep)
            if not n_more:
                break
            n_folded += n_more
            folded, known = infer_shapes(again, known_more, memory_budget), known_more
        folded, known = settle_control_flow(folded, known, fold)
    return folded, n_folded, known


__all__ = ["ImportedModel", "settle_shapes", "TensorInfo", "import_model"]
