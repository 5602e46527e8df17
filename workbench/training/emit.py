"""Writing new ONNX nodes into a graph whose every tensor has a static shape.

The training program is one ONNX graph (forward, loss, backward, update),
so each gradient rule is a few ordinary operators that the importer, the
transformation library and onnxruntime all take as they take any model.
``Emitter`` hands out fresh names, keeps the shape and type of every tensor
it knows (the forward pass's from shape inference, the new ones as the
rules state them) and turns numpy constants into initializers.
"""
import numpy as np
import onnx
from onnx import helper, numpy_helper

from workbench.importer.shapes import tensor_types

FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16,
               onnx.TensorProto.BFLOAT16}


class Emitter:
    def __init__(self, model: onnx.ModelProto):
        self.model = model
        self.types = dict(tensor_types(model))   # name -> (elem_type, shape)
        self.nodes = []                           # new nodes, in the order written
        self.initializers = []
        self._used = set(self.types)
        for node in model.graph.node:
            self._used.update(node.output)
            self._used.add(node.name)
        self._constants = {}
        self.scope = ""   # the name scope new nodes go in (see ``naming``)
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)

    def fresh(self, base: str) -> str:
        if not base.startswith("/"):   # tensor names; node names keep their scope path
            base = base.replace("/", "_").strip("_") or "t"
        name, i = base, 1
        while name in self._used:
            name, i = f"{base}_{i}", i + 1
        self._used.add(name)
        return name

    def shape(self, name: str) -> tuple:
        shape = self.types.get(name, (None, None))[1]
        if shape is None:
            raise KeyError(name)
        return shape

    def elem_type(self, name: str) -> int:
        return self.types[name][0]

    def np_dtype(self, name: str):
        return helper.tensor_dtype_to_np_dtype(self.elem_type(name))

    def is_float(self, name: str) -> bool:
        return name in self.types and self.types[name][0] in FLOAT_TYPES

    def op(self, op_type: str, inputs: list, like: str = None, shape=None, elem_type=None,
           outputs: int = 1, name: str = None, domain: str = "", **attrs):
        """Add a node; its first output takes the shape and type of ``like`` unless
        given. Returns the output name (a list when ``outputs`` > 1)."""
        base = name or f"grad_{op_type}"
        outs = [self.fresh(base) for _ in range(outputs)]
        node_name = self.fresh(f"{self.scope}/{op_type}" if self.scope else base + "_node")
        node = helper.make_node(op_type, list(inputs), outs, name=node_name, domain=domain,
                                **attrs)
        self.nodes.append(node)
        if like is not None:
            elem_type = elem_type if elem_type is not None else self.types[like][0]
            shape = tuple(shape) if shape is not None else self.types[like][1]
        if shape is not None and elem_type is not None:
            self.types[outs[0]] = (elem_type, tuple(int(d) for d in shape))
        return outs if outputs > 1 else outs[0]

    def const(self, value, dtype=None, name: str = "c") -> str:
        """An initializer holding ``value`` (deduplicated by content)."""
        array = np.asarray(value, dtype=dtype)
        key = (array.dtype.str, array.shape, array.tobytes())
        if key in self._constants:
            return self._constants[key]
        cname = self.fresh(name)
        self.initializers.append(numpy_helper.from_array(array, cname))
        self.types[cname] = (helper.np_dtype_to_tensor_dtype(array.dtype), array.shape)
        self._constants[key] = cname
        return cname

    def scalar(self, value, like: str) -> str:
        """A rank-0 constant in the element type of ``like``."""
        return self.const(np.array(value, dtype=self.np_dtype(like)))

    def ints(self, values) -> str:
        return self.const(np.asarray(list(values), dtype=np.int64), name="i64")

    def constant_value(self, name: str) -> np.ndarray:
        """The value of an initializer or Constant output (gradient rules read the
        axes, pads and starts the forward pass was given as tensors)."""
        for t in list(self.model.graph.initializer) + self.initializers:
            if t.name == name:
                return numpy_helper.to_array(t)
        for node in self.model.graph.node:
            if node.op_type == "Constant" and node.output[0] == name:
                attr = node.attribute[0]
                value = helper.get_attribute_value(attr)
                return numpy_helper.to_array(value) if attr.name == "value" else np.asarray(value)
        raise ValueError(f"'{name}' is computed at run time; this gradient needs it constant")

    # Shape helpers every rule needs -------------------------------------------------
    def reshape(self, x: str, shape) -> str:
        shape = tuple(int(d) for d in shape)
        if self.shape(x) == shape:
            return x
        return self.op("Reshape", [x, self.ints(shape)], like=x, shape=shape)

    def reduce_sum(self, x: str, axes, keepdims: bool) -> str:
        shape = self.shape(x)
        axes = sorted(a % len(shape) for a in axes)
        if not axes:
            return x
        kept = tuple(1 if i in axes else d for i, d in enumerate(shape))
        out_shape = kept if keepdims else tuple(d for i, d in enumerate(shape) if i not in axes)
        if self.opset >= 13:
            return self.op("ReduceSum", [x, self.ints(axes)], like=x, shape=out_shape,
                           keepdims=int(keepdims))
        return self.op("ReduceSum", [x], like=x, shape=out_shape, axes=axes,
                       keepdims=int(keepdims))

    def unbroadcast(self, grad: str, shape) -> str:
        """The gradient of a tensor of ``shape`` that was broadcast to ``grad``'s shape:
        the sum over every axis the broadcast added or stretched."""
        shape = tuple(shape)
        gshape = self.shape(grad)
        if gshape == shape:
            return grad
        lead = len(gshape) - len(shape)
        axes = list(range(lead)) + [lead + i for i, d in enumerate(shape)
                                    if d == 1 and gshape[lead + i] != 1]
        return self.reshape(self.reduce_sum(grad, axes, keepdims=True), shape)

    def expand(self, x: str, shape) -> str:
        shape = tuple(shape)
        if self.shape(x) == shape:
            return x
        return self.op("Expand", [x, self.ints(shape)], like=x, shape=shape)

    def zeros(self, like: str) -> str:
        zero = self.scalar(0, like)
        return self.expand(self.reshape(zero, (1,) * len(self.shape(like))), self.shape(like)) \
            if self.shape(like) else zero

    def transpose(self, x: str, perm) -> str:
        perm = [int(p) for p in perm]
        if perm == sorted(perm):
            return x
        shape = self.shape(x)
        return self.op("Transpose", [x], like=x, shape=[shape[p] for p in perm], perm=perm)

    def binary(self, op_type: str, a: str, b: str) -> str:
        shape = np.broadcast_shapes(self.shape(a), self.shape(b))
        return self.op(op_type, [a, b], like=a, shape=shape)

    def mul(self, a: str, b: str) -> str:
        return self.binary("Mul", a, b)

    def add(self, a: str, b: str) -> str:
        return self.binary("Add", a, b)

    def sub(self, a: str, b: str) -> str:
        return self.binary("Sub", a, b)

    def div(self, a: str, b: str) -> str:
        return self.binary("Div", a, b)

    def unary(self, op_type: str, x: str, **attrs) -> str:
        return self.op(op_type, [x], like=x, **attrs)

    def finish(self) -> None:
        """Append what was written to the model's graph."""
        self.model.graph.node.extend(self.nodes)
        self.model.graph.initializer.extend(self.initializers)
        self.nodes, self.initializers = [], []

