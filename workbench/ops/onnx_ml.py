"""Operators of the ai.onnx.ml domain: Binarizer, ArrayFeatureExtractor, TreeEnsemble.

TreeEnsemble's trees are attributes, so they are known at import: their
nodes become constant tables compiled into the program, and one parallel
map over the samples walks every tree from its root, comparing the sample's
feature with the node's split (or set of members) until a leaf, and
aggregates the leaves' weights per target. As the spec's reference does,
``post_transform`` must be NONE (it applies none); other values are refused.
String tensors (and so LabelEncoder's string keys) are not supported.
"""
import math

import dace
import numpy as np

from workbench.ops.elementwise import broadcast_map
from workbench.ops.flat_reads import at, flat_shapes, read_all
from workbench.ops.index_maps import check_shape, index_map, literal, op_sdfg, params
from workbench.ops.registry import implements, mapped_tasklet, np_dtype

DOMAIN = "ai.onnx.ml"


@implements("Binarizer", domain=DOMAIN)
def binarizer(call):
    if np_dtype(call.dtype(call.input(0))).kind not in "fiu":
        raise call.fail("Binarizer is defined for numeric tensors only")
    return broadcast_map(call, f"1 if x > {literal(float(call.attr('threshold', 0.0)))} else 0",
                         ["x"])


@implements("ArrayFeatureExtractor", domain=DOMAIN)
def array_feature_extractor(call):
    x, indices, y = call.input(0), call.input(1), call.output(0)
    shape = call.shape(x)
    picked = math.prod(call.shape(indices))
    # A vector is seen as one row, as onnxruntime (and the spec's reference) do.
    rows, last = (math.prod(shape[:-1]), shape[-1]) if len(shape) > 1 else (1, shape[0])
    out_shape = tuple(shape[:-1]) + (picked,) if len(shape) > 1 else (1, picked)
    check_shape(call, y, out_shape)
    if not rows * picked:
        raise call.fail(f"empty output of shape {list(out_shape)}")
    sdfg, state = op_sdfg(call, "array_feature_extractor",
                          {**flat_shapes(call, x, indices), y: (rows, picked)})
    # An index outside [0, last) has no defined result; it is clamped so no read leaves x.
    code = (f"__k = {at(call, indices, 'i1')}\n"
            f"__k = 0 if __k < 0 else ({last - 1} if __k > {last - 1} else __k)\n"
            f"o = {at(call, x, f'i0 * {last} + __k')}")
    index_map(state, "array_feature_extractor", (rows, picked), read_all(call, x, indices),
              code, {"o": dace.Memlet(f"{y}[{', '.join(params(2))}]")})
    return sdfg


MODES = ("<=", "<", ">=", ">", "==", "!=", "member")   # nodes_modes 0..6
AGGREGATES = {0: "average", 1: "sum", 2: "min", 3: "max"}


def _tensor_attr(call, name, required=True):
    value = call.attr(name)
    if value is None:
        if required:
            raise call.fail(f"attribute {name} is missing")
        return None
    if isinstance(value, dict) and "__tensor__" in value:
        return np.array(value["values"], dtype=np.dtype(value["__tensor__"]))
    return np.array(value)


@implements("TreeEnsemble", domain=DOMAIN)
def tree_ensemble(call):
    x, y = call.input(0), call.output(0)
    if np_dtype(call.dtype(x)).kind != "f":
        raise call.fail("TreeEnsemble reads floating-point features only")
    if int(call.attr("post_transform", 0)) != 0:
        raise call.fail(f"post_transform={call.attr('post_transform')} is not supported "
                        "(only 0, NONE)")
    aggregate = AGGREGATES.get(int(call.attr("aggregate_function", 1)))
    if aggregate is None:
        raise call.fail(f"aggregate_function={call.attr('aggregate_function')} is none of 0-3")
    shape = call.shape(x)
    if len(shape) != 2:
        raise call.fail(f"X of shape {list(shape)}: (samples, features) expected")
    samples, features = shape
    targets = int(call.attr("n_targets", 0))
    check_shape(call, y, (samples, targets))
    table = _tables(call, features, targets)
    if not samples * targets:
        raise call.fail("empty input or output")
    sdfg, state = op_sdfg(call, "tree_ensemble", flat_shapes(call, x))
    ctype = call.dtype(y).ctype
    init = {"sum": "0", "average": "0", "min": f"std::numeric_limits<{ctype}>::max()",
            "max": f"std::numeric_limits<{ctype}>::lowest()"}[aggregate]
    combine = {"sum": "acc[t] += w;", "average": f"acc[t] += w / {table['trees']};",
               "min": "acc[t] = std::min(acc[t], w);",
               "max": "acc[t] = std::max(acc[t], w);"}[aggregate]
    row = f"&_{x}" if samples * features == 1 else f"_{x} + s * {features}"
    code = f"""
{table['code']}
{ctype} acc[{targets}];
for (int t = 0; t < {targets}; ++t) acc[t] = {init};
for (int r = 0; r < {table['trees']}; ++r) {{
    const {ctype}* v = {row};
    long n = ROOT[r];
    bool leaf = ROOT_LEAF[r];
    while (!leaf) {{
        double f = (double) v[FEATURE[n]];
        bool go;
        if (f != f) go = MISSING_TRUE[n];
        else switch (MODE[n]) {{
            case 0: go = f <= SPLIT[n]; break;
            case 1: go = f < SPLIT[n]; break;
            case 2: go = f >= SPLIT[n]; break;
            case 3: go = f > SPLIT[n]; break;
            case 4: go = f == SPLIT[n]; break;
            case 5: go = f != SPLIT[n]; break;
            default: {{
                go = false;
                for (long m = MEMBER_AT[n]; m < MEMBER_AT[n + 1]; ++m) go = go || f == MEMBERS[m];
            }}
        }}
        leaf = go ? TRUE_LEAF[n] : FALSE_LEAF[n];
        n = go ? TRUE_ID[n] : FALSE_ID[n];
    }}
    long t = LEAF_TARGET[n];
    double w = LEAF_WEIGHT[n];
    {combine}
}}
for (int t = 0; t < {targets}; ++t) o[t] = acc[t];
"""
    out = f"{y}[s, 0:{targets}]"
    if targets == 1:   # a one-element row reaches the tasklet as a scalar
        code = code.replace("o[t] = acc[t]", "o = acc[t]")
        out = f"{y}[s, 0]"
    mapped_tasklet(state, "tree_ensemble", {"s": f"0:{samples}"}, read_all(call, x), code,
                   {"o": dace.Memlet(out)}, language=dace.Language.CPP)
    return sdfg


def _tables(call, features: int, targets: int) -> dict:
    """The trees as C++ constant tables, checked so that no walk leaves them."""
    modes = _tensor_attr(call, "nodes_modes").astype(np.int64)
    count = modes.size
    ints = {key: _tensor_attr(call, f"nodes_{key}").astype(np.int64)
            for key in ("featureids", "truenodeids", "falsenodeids", "trueleafs", "falseleafs")}
    splits = _tensor_attr(call, "nodes_splits").astype(np.float64)
    missing = _tensor_attr(call, "nodes_missing_value_tracks_true", required=False)
    missing = np.zeros(count, np.int64) if missing is None else missing.astype(np.int64)
    leaf_targets = _tensor_attr(call, "leaf_targetids").astype(np.int64)
    leaf_weights = _tensor_attr(call, "leaf_weights").astype(np.float64)
    roots = _tensor_attr(call, "tree_roots").astype(np.int64)
    if any(a.size != count for a in [*ints.values(), splits, missing]):
        raise call.fail("the nodes_* attributes differ in length")
    if leaf_targets.size != leaf_weights.size:
        raise call.fail("leaf_targetids and leaf_weights differ in length")
    if ((modes < 0) | (modes > 6)).any():
        raise call.fail(f"nodes_modes holds values outside 0-6: {sorted(set(modes))}")
    if ((ints["featureids"] < 0) | (ints["featureids"] >= features)).any():
        raise call.fail(f"a node reads a feature outside the {features} of X")
    if ((leaf_targets < 0) | (leaf_targets >= targets)).any():
        raise call.fail(f"a leaf names a target outside the {targets} of n_targets")
    for side in ("true", "false"):
        ids, leaf = ints[f"{side}nodeids"], ints[f"{side}leafs"].astype(bool)
        limit = np.where(leaf, leaf_weights.size, count)
        if ((ids < 0) | (ids >= limit)).any():
            raise call.fail(f"nodes_{side}nodeids points outside the nodes or leaves")
    if ((roots < 0) | (roots >= count)).any():
        raise call.fail("tree_roots points outside the nodes")
    # A root whose two branches are the same leaf is that leaf (the spec's reference).
    root_leaf = (ints["trueleafs"][roots].astype(bool) & ints["falseleafs"][roots].astype(bool)
                 & (ints["truenodeids"][roots] == ints["falsenodeids"][roots]))
    roots = np.where(root_leaf, ints["truenodeids"][roots], roots)
    # Set members: each member node takes the next NaN-terminated run of membership_values.
    member_at = np.zeros(count + 1, np.int64)
    members = []
    values = _tensor_attr(call, "membership_values", required=False)
    runs = iter(np.split(values, np.flatnonzero(np.isnan(values)) + 1)) if values is not None \
        else iter(())
    for n in range(count):
        if modes[n] == 6:
            run = next(runs, None)
            if run is None:
                raise call.fail("membership_values has fewer sets than the member nodes")
            members.extend(float(v) for v in run if not np.isnan(v))
        member_at[n + 1] = len(members)
    # Every walk must reach a leaf: a cycle would loop forever at run time.
    _check_acyclic(call, roots, root_leaf, ints)

    def c_array(name, ctype, data):
        data = list(data) or [0]
        text = ", ".join(_c_double(v) if ctype == "double" else str(int(v)) for v in data)
        return f"static const {ctype} {name}[{len(data)}] = {{{text}}};"

    code = "\n".join([
        c_array("MODE", "int", modes), c_array("FEATURE", "long", ints["featureids"]),
        c_array("SPLIT", "double", splits), c_array("MISSING_TRUE", "int", missing),
        c_array("TRUE_ID", "long", ints["truenodeids"]),
        c_array("FALSE_ID", "long", ints["falsenodeids"]),
        c_array("TRUE_LEAF", "int", ints["trueleafs"]),
        c_array("FALSE_LEAF", "int", ints["falseleafs"]),
        c_array("LEAF_TARGET", "long", leaf_targets),
        c_array("LEAF_WEIGHT", "double", leaf_weights),
        c_array("ROOT", "long", roots), c_array("ROOT_LEAF", "int", root_leaf),
        c_array("MEMBER_AT", "long", member_at), c_array("MEMBERS", "double", members)])
    return {"code": code, "trees": int(roots.size)}


def _c_double(value) -> str:
    value = float(value)
    if np.isnan(value):
        return "NAN"
    if np.isinf(value):
        return "INFINITY" if value > 0 else "-INFINITY"
    return repr(value)


def _check_acyclic(call, roots, root_leaf, ints):
    for root, leaf in zip(roots, root_leaf):
        if leaf:
            continue
        stack = [(int(root), 0)]
        while stack:
            node, depth = stack.pop()
            if depth > len(ints["truenodeids"]):
                raise call.fail(f"the tree from root {root} has a cycle")
            for side in ("true", "false"):
                if not ints[f"{side}leafs"][node]:
                    stack.append((int(ints[f"{side}nodeids"][node]), depth + 1))
