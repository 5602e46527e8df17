"""The operator-class table of "Data Movement Is All You Need" (Ivanov et al.).

Operators fall in three classes: tensor contractions, statistical
normalizations (and reductions), element-wise operators; layout and shape
operators (transposes, reshapes, gathers) are a fourth, "data layout". The
table gives each class's share of FLOPs, of bytes moved and, once a profile
exists, of runtime.
"""
from collections import defaultdict

CLASSES = ("tensor contraction", "normalization", "element-wise", "data layout")

CONTRACTIONS = {"MatMul", "Gemm", "Conv", "ConvTranspose", "Einsum", "Attention",
                "MatMulInteger", "GemmEpilogue", "ConvEpilogue", "FusedGemm", "MatMulStrided",
                "LSTM", "GRU", "RNN"}
NORMALIZATIONS = {"Softmax", "LogSoftmax", "Hardmax", "LayerNormalization",
                  "BatchNormalization", "InstanceNormalization", "GroupNormalization",
                  "RMSNormalization", "MeanVarianceNormalization", "LpNormalization",
                  "GlobalAveragePool", "GlobalMaxPool", "AveragePool", "MaxPool", "LpPool",
                  "ArgMax", "ArgMin", "TopK", "CumSum"}
DATA_LAYOUT = {"Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Concat", "Split",
               "Slice", "Gather", "GatherElements", "GatherND", "ScatterND", "ScatterElements",
               "Expand", "Tile", "Pad", "Identity", "Dropout", "DepthToSpace", "SpaceToDepth",
               "Resize", "Upsample", "Cast", "CastLike", "Shape", "Size", "Constant",
               "ConstantOfShape", "Range", "OneHot", "Trilu", "NonZero", "Compress",
               "ReverseSequence", "EyeLike"}


def op_class(op_type: str) -> str:
    if op_type in CONTRACTIONS:
        return "tensor contraction"
    if op_type in NORMALIZATIONS or op_type.startswith("Reduce"):
        return "normalization"
    if op_type in DATA_LAYOUT:
        return "data layout"
    return "element-wise"


def class_table(ops: dict, flops: dict, moved: dict, runtime: dict = None) -> list:
    """Rows per class with shares (percent).

    ``ops`` maps ONNX operator name -> op type; ``flops``/``moved``/``runtime``
    map operator names to FLOPs, bytes and seconds. Operators the analysis
    cannot attribute (renamed by a transformation) count as element-wise.
    """
    totals = {k: defaultdict(float) for k in ("flops", "bytes", "runtime")}
    for name, value in flops.items():
        totals["flops"][op_class(ops.get(name, ""))] += value
    for name, value in moved.items():
        totals["bytes"][op_class(ops.get(name, ""))] += value
    for name, value in (runtime or {}).items():
        totals["runtime"][op_class(ops.get(name, ""))] += value
    rows = []
    for cls in CLASSES:
        row = {"class": cls, "operators": sum(1 for t in ops.values() if op_class(t) == cls)}
        for key, per_class in totals.items():
            total = sum(per_class.values())
            row[f"{key}_pct"] = round(100.0 * per_class[cls] / total, 2) if total else None
        rows.append(row)
    return rows


def format_table(rows: list) -> str:
    lines = [f"{'class':<20}{'ops':>5}{'FLOP %':>9}{'bytes %':>9}{'runtime %':>11}"]
    for r in rows:
        def pct(v):
            return "-" if v is None else f"{v:.1f}"
        lines.append(f"{r['class']:<20}{r['operators']:>5}{pct(r['flops_pct']):>9}"
                     f"{pct(r['bytes_pct']):>9}{pct(r['runtime_pct']):>11}")
    return "\n".join(lines)
