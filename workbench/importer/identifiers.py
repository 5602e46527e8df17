"""Names in the generated C++: ONNX names made into identifiers that clash with nothing."""
import keyword
import re

# Names the generated C++ must not use for arrays or connectors.
_RESERVED = set(keyword.kwlist) | {
    "int", "float", "double", "char", "bool", "auto", "const", "class", "struct", "new", "delete",
    "min", "max", "abs", "exp", "log", "pow", "sqrt", "sin", "cos", "tanh", "floor", "ceil",
    "round", "sign", "mod", "default", "switch", "case", "template", "this",
    "operator", "signed", "unsigned", "long", "short", "void", "union", "register", "volatile",
    "static", "extern", "inline", "typename", "namespace", "using", "std", "dace", "__state",
    # C++'s alternative operator spellings are keywords too.
    "xor", "bitand", "bitor", "compl", "and_eq", "or_eq", "xor_eq", "not_eq",
}


def c_identifier(name: str, taken: set) -> str:
    base = re.sub(r"[^0-9A-Za-z_]", "_", name).strip("_") or "t"
    base = re.sub(r"_+", "_", base)
    if base[0].isdigit() or base in _RESERVED or base.startswith("__"):
        base = "t_" + base
    out, i = base, 1
    while out in taken:
        out, i = f"{base}_{i}", i + 1
    taken.add(out)
    return out
