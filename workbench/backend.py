"""The workbench as a standard ONNX backend (``onnx.backend.base.Backend``).

``prepare`` refuses models with operator types the workbench does not
implement by raising ``unittest.SkipTest`` (the ONNX test runner counts it
as skipped). The model is imported and compiled on the first ``run``,
because small graph inputs that act as shapes, axes or sizes are bound as
constants then, as an exporter would have written them. Folding is limited
to Constant/Shape/Size, so every other node runs as compiled code; an
unsupported case (a dtype, a data-dependent shape) is a skip with its
typed reason, never a wrong answer. Sequence and optional inputs are fed
element by element and their outputs reassembled (importer/sequences.py);
NonZero, Unique and NonMaxSuppression outputs whose size the run-time data
decide are bounded, and cut to the count the program wrote
(importer/data_dependent.py).
"""
import unittest

import numpy as np
import onnx
from onnx import numpy_helper
from onnx.backend.base import Backend, BackendRep

from workbench.errors import ShapeError, UnsupportedCaseError, UnsupportedOpError
from workbench.importer.data_dependent import keep_counted
from workbench.importer.sequences import (assemble, lower_sequences, lowered_op_types,
                                          needs_lowering)

# Graph inputs up to this many elements are bound as initializers at run time.
BIND_MAX_ELEMENTS = 64


class WorkbenchRep(BackendRep):
    def __init__(self, model: onnx.ModelProto, build_slot: str = "onnx-backend"):
        self.model = model
        self.build_slot = build_slot
        self.session = None
        self.lowered = None
        inits = {t.name for t in model.graph.initializer}
        self.input_names = [i.name for i in model.graph.input if i.name not in inits]

    def run(self, inputs, **kwargs):
        values = self._values(inputs)
        # Sequence and optional inputs become tensors, one per element (importer/sequences.py).
        tensors = {i.name for i in self.model.graph.input if i.type.HasField("tensor_type")}
        structured = {k: v for k, v in values.items() if k not in tensors}
        feeds = {k: v for k, v in values.items() if k in tensors}
        if any(v is None or isinstance(v, (list, tuple)) for v in feeds.values()):
            raise unittest.SkipTest("unsupported: a list or None given for a tensor input")
        try:
            if self.session is None:
                self.session, self.lowered = self._open(feeds, structured)
            if self.lowered is not None:
                again = lower_sequences(self.lowered.bound, structured)
                feeds.update(again.feeds)
            outputs = self.session.run({i.onnx_name: feeds[i.onnx_name]
                                        for i in self.session.inputs})
        except (UnsupportedCaseError, UnsupportedOpError, ShapeError) as e:
            raise unittest.SkipTest(f"unsupported: {e}") from None
        outputs = keep_counted(outputs, self.session.model.counted)
        if self.lowered is not None:
            outputs = assemble(self.lowered, outputs)
        return tuple(outputs[o.name] for o in self.model.graph.output)

    def _values(self, inputs) -> dict:
        values = inputs.values() if isinstance(inputs, dict) else (
            inputs if isinstance(inputs, (list, tuple)) else [inputs])
        if any(isinstance(v, dict) for v in values):
            raise unittest.SkipTest("unsupported: map inputs")
        if isinstance(inputs, dict):
            names, values = list(inputs), list(inputs.values())
        else:
            names = self.input_names
            values = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
        return {k: (v if v is None or isinstance(v, (list, tuple)) else np.asarray(v))
                for k, v in zip(names, values)}

    def _open(self, feeds, structured):
        from workbench.importer import import_model
        from workbench.session import Session
        model = onnx.ModelProto()
        model.CopyFrom(self.model)
        small = {k: v for k, v in feeds.items() if v.size <= BIND_MAX_ELEMENTS}
        if small:  # kept in graph.input too: IR < 4 requires initializers to be inputs
            model.graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in small.items())
        lowered = None
        if needs_lowering(model):
            lowered = lower_sequences(model, {**feeds, **structured})
            lowered.bound = model
            model, feeds = lowered.model, {**feeds, **lowered.feeds}
        shapes = {k: list(v.shape) for k, v in feeds.items() if k not in small}
        imported = import_model(model, input_shapes=shapes, name="case", fold=False,
                                bounded=True)
        return Session(imported, build_slot=self.build_slot), lowered


class WorkbenchBackend(Backend):
    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs):
        if not cls.supports_device(device):
            raise unittest.SkipTest(f"device {device} is not supported (CPU only)")
        from workbench.importer.to_sdfg import FOLDED_AT_IMPORT, check_supported
        try:
            check_supported(model, allow=FOLDED_AT_IMPORT | lowered_op_types(model))
        except UnsupportedOpError as e:
            raise unittest.SkipTest(f"unsupported op types: {', '.join(e.missing)}") from None
        return WorkbenchRep(model, kwargs.get("build_slot", "onnx-backend"))

    @classmethod
    def run_model(cls, model, inputs, device="CPU", **kwargs):
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return str(device).upper().startswith("CPU")


prepare = WorkbenchBackend.prepare
run_model = WorkbenchBackend.run_model
supports_device = WorkbenchBackend.supports_device
