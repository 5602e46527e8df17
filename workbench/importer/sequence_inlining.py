"""If and Loop nodes that carry sequences or optionals: inlined, unrolled.

``Inlining`` is a part of ``sequence_lowering.Lowering``: it copies a body's
nodes into the graph under fresh names (SequenceMap uses it too), picks the
branch of an If whose condition is known at import, and unrolls a Loop whose
trip count and conditions are.
"""
import numpy as np
import onnx

from workbench.importer.sequence_values import MAX_UNROLL, rename_reads


class Inlining:
    """Inlined bodies and the ``_If`` and ``_Loop`` methods."""

    def inline(self, body, bindings: dict, tag: str) -> list:
        """Add ``body``'s nodes under fresh names, its inputs bound to ``bindings``
        (formal name -> tensor name, sequence or ABSENT); the values of its outputs."""
        rename = {}
        for formal, value in bindings.items():
            if not isinstance(value, str):
                name = self.fresh(f"{formal}__{tag}")
                self.values[name] = value
                value = name
            rename[formal] = value
        for t in body.initializer:
            copy = onnx.TensorProto()
            copy.CopyFrom(t)
            copy.name = rename[t.name] = self.fresh(f"{t.name}__{tag}")
            self.inits.append(copy)
            self.consts[copy.name] = copy
        for inner in body.node:
            clone = onnx.NodeProto()
            clone.CopyFrom(inner)
            for pos, name in enumerate(clone.input):
                clone.input[pos] = rename.get(name, name)
            for a in clone.attribute:   # nested bodies read the renamed names too
                for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                    rename_reads(g, rename)
            for pos, name in enumerate(clone.output):
                if name:
                    clone.output[pos] = rename[name] = self.fresh(f"{name}__{tag}")
            clone.name = self.fresh(f"{tag}__{inner.name or inner.op_type}")
            self.node(clone, clone.name)
        outs = []
        for out in body.output:
            name = rename.get(out.name, out.name)
            outs.append(self.values.get(name, name))
        return outs

    def bind(self, name, value):
        """Graph value ``name`` is ``value`` (a tensor name, a sequence or ABSENT)."""
        if isinstance(value, str):
            self.emit("Identity", [value], [name], f"{name}_bind")
        else:
            self.values[name] = value

    def _If(self, node, fail):
        """A condition known at import picks the branch, inlined."""
        cond = bool(np.asarray(self.known(node.input[0], fail, "condition")).ravel()[0])
        branch = next(a.g for a in node.attribute
                      if a.name == ("then_branch" if cond else "else_branch"))
        for name, value in zip(node.output, self.inline(branch, {}, node.name or "If")):
            self.bind(name, value)

    def _Loop(self, node, fail):
        """A trip count and conditions known at import: the body unrolled, its carried values
        (sequences included) passed from one copy to the next, scan outputs stacked."""
        body = next(a.g for a in node.attribute if a.name == "body")
        ins = list(node.input) + [""] * (2 - len(node.input))
        trip = int(np.asarray(self.known(ins[0], fail, "trip count")).ravel()[0]) \
            if ins[0] else None
        cond = bool(np.asarray(self.known(ins[1], fail, "condition")).ravel()[0]) \
            if ins[1] else True
        carried = [self.values.get(n, n) for n in ins[2:]]
        scans = [[] for _ in body.output[1 + len(carried):]]
        label = node.name or "Loop"
        i = 0
        while cond and (trip is None or i < trip):
            if i >= MAX_UNROLL:
                raise fail(f"more than {MAX_UNROLL} iterations to unroll")
            bindings = {body.input[0].name: self.const(np.array(i, np.int64), f"{label}_i{i}"),
                        body.input[1].name: self.const(np.array(cond), f"{label}_cond{i}")}
            bindings.update({f.name: v for f, v in zip(body.input[2:], carried)})
            outs = self.inline(body, bindings, f"{label}__{i}")
            cond = bool(np.asarray(self.known(outs[0], fail, "condition")).ravel()[0])
            carried = outs[1:1 + len(carried)]
            for parts, value in zip(scans, outs[1 + len(carried):]):
                if not isinstance(value, str):
                    raise fail("a scan output is a sequence or an optional")
                parts.append(value)
            i += 1
        for name, value in zip(node.output, carried):
            self.bind(name, value)
        for name, parts in zip(node.output[len(carried):], scans):
            if not parts:
                raise fail(f"scan output '{name}' of no iterations has no shape")
            stacked = [self.fresh(f"{p}__stacked") for p in parts]
            for p, st in zip(parts, stacked):
                self.unsqueeze(p, st, 0, node)
            self.emit("Concat", stacked, [name], f"{label}_scan", axis=0)
