"""oneDNN for convolutions, pooling and GEMMs with constant weights: found at build time like BLAS, through a small shim.

pip's ``onednn-cpu-gomp`` (+ ``-devel``) puts ``libdnnl.so`` and its headers in
the environment's ``lib``/``include`` (built on GNU OpenMP, as DaCe's programs
are). Generated programs do not include ``dnnl.hpp`` (it would add seconds to
every build): ``native/wb_dnnl.cpp`` is compiled once per machine and oneDNN
version into ``libwb_dnnl.so`` under the cache, and programs include its C
header ``wb_dnnl.h`` and link it through the DaCe environment ``WorkbenchOneDNN``.
``WORKBENCH_ONEDNN=0`` turns it off; ``WORKBENCH_ONEDNN_ROOT`` names another
installation (a folder with ``include/dnnl.hpp`` and ``lib/libdnnl.so``).
"""
import ctypes
import hashlib
import os
import subprocess
import sys
import threading
from pathlib import Path

import dace.library

from workbench.build.settings import cache_dir

NATIVE = Path(__file__).parent / "native"
_lock = threading.Lock()
# the soname lets an exported program find the shim copied beside it
FLAGS = ["-O2", "-std=c++17", "-fPIC", "-shared", "-Wl,-soname,libwb_dnnl.so"]
_built = {}

POST = {"add": 1, "relu": 2, "clip": 3, "swish": 4, "hardswish": 5, "sigmoid": 6}
MAX_POST = 4


class ConvDesc(ctypes.Structure):
    """``wb_conv_desc`` of wb_dnnl.h."""
    _fields_ = [("nsp", ctypes.c_int), ("n", ctypes.c_long), ("c", ctypes.c_long),
                ("m", ctypes.c_long), ("groups", ctypes.c_long)] + [
        (f, ctypes.c_long * 3) for f in ("in_", "out", "k", "stride", "dil", "pad_l", "pad_r")] + [
        ("src_strides", ctypes.c_long * 5), ("dst_strides", ctypes.c_long * 5),
        ("has_bias", ctypes.c_int), ("n_post", ctypes.c_int),
        ("post", ctypes.c_int * MAX_POST), ("alpha", ctypes.c_float * MAX_POST),
        ("beta", ctypes.c_float * MAX_POST), ("weights_vary", ctypes.c_int)]


class DeconvDesc(ConvDesc):
    """``wb_conv_desc`` for ``wb_dnnl_deconv`` (ConvTranspose): c and m are the input's
    and the output's channels."""


class WGradDesc(ctypes.Structure):
    """``wb_wgrad_desc`` of wb_dnnl.h: a weight gradient on the backward-weights primitive."""
    _fields_ = [("nsp", ctypes.c_int), ("n", ctypes.c_long), ("c", ctypes.c_long),
                ("m", ctypes.c_long), ("groups", ctypes.c_long)] + [
        (f, ctypes.c_long * 3) for f in ("in_", "out", "k", "stride", "dil", "pad_l", "pad_r")] + [
        ("src_strides", ctypes.c_long * 5), ("diff_dst_strides", ctypes.c_long * 5),
        ("diff_w_strides", ctypes.c_long * 6)]


class PoolDesc(ctypes.Structure):
    """``wb_pool_desc`` of wb_dnnl.h."""
    _fields_ = [("nsp", ctypes.c_int), ("n", ctypes.c_long), ("c", ctypes.c_long)] + [
        (f, ctypes.c_long * 3) for f in ("in_", "out", "k", "stride", "dil", "pad_l", "pad_r")] + [
        ("src_strides", ctypes.c_long * 5), ("dst_strides", ctypes.c_long * 5),
        ("algorithm", ctypes.c_int)]


POOL = {"max": 1, "avg_include_pad": 2, "avg_exclude_pad": 3}


class MatMulDesc(ctypes.Structure):
    """``wb_matmul_desc`` of wb_dnnl.h."""
    _fields_ = [("m", ctypes.c_long), ("k", ctypes.c_long), ("n", ctypes.c_long),
                ("lda", ctypes.c_long), ("ldc", ctypes.c_long),
                ("b_strides", ctypes.c_long * 2), ("has_bias", ctypes.c_int)]


# descriptor class -> (its C type, the shim's check function)
C_TYPES = {ConvDesc: ("wb_conv_desc", "wb_dnnl_conv_check"),
           PoolDesc: ("wb_pool_desc", "wb_dnnl_pool_check"),
           MatMulDesc: ("wb_matmul_desc", "wb_dnnl_matmul_check"),
           WGradDesc: ("wb_wgrad_desc", "wb_dnnl_wgrad_check"),
           DeconvDesc: ("wb_conv_desc", "wb_dnnl_deconv_check")}


def root():
    """The oneDNN installation (a folder with include/ and lib/), or None."""
    if os.environ.get("WORKBENCH_ONEDNN", "1").strip().lower() in ("0", "no", "off", "false"):
        return None
    for base in filter(None, (os.environ.get("WORKBENCH_ONEDNN_ROOT"), sys.prefix, sys.base_prefix,
                              "/usr", "/usr/local")):
        base = Path(base)
        if (base / "include" / "dnnl.hpp").exists() and any(
                (base / lib / "libdnnl.so").exists() for lib in ("lib", "lib64")):
            return base
    return None


def library_file():
    """oneDNN's shared library under its soname (what the shim's DT_NEEDED names)."""
    base = root()
    libdir = next(base / lib for lib in ("lib", "lib64") if (base / lib / "libdnnl.so").exists())
    versioned = sorted(libdir.glob("libdnnl.so.[0-9]"))
    return versioned[0] if versioned else libdir / "libdnnl.so"


_keys = {}


def sources() -> list:
    """The shim's C++ files, compiled together into one library."""
    return sorted(NATIVE.glob("*.cpp"))


def _keyed(base: Path) -> tuple:
    """(oneDNN's library folder, the shim's key) for the installation at ``base``, found
    once per process: planning asks ``available()`` for every convolution it looks at."""
    if base not in _keys:
        libdir = next(base / lib for lib in ("lib", "lib64")
                      if (base / lib / "libdnnl.so").exists())
        source = b"".join(f.read_bytes() for f in sources() + sorted(NATIVE.glob("*.h*")))
        version = (base / "include" / "oneapi" / "dnnl" / "dnnl_version.h")
        _keys[base] = libdir, hashlib.sha256(
            source + str(libdir).encode() + " ".join(FLAGS).encode()
            + (version.read_bytes() if version.exists() else b"")).hexdigest()[:16]
    return _keys[base]


def shim():
    """Path of libwb_dnnl.so for this oneDNN (built on first use), or None without oneDNN."""
    base = root()
    if base is None:
        return None
    libdir, key = _keyed(base)
    with _lock:
        if key in _built:
            return _built[key]
        out = cache_dir() / "native" / key / "libwb_dnnl.so"
        if not out.exists():
            out.parent.mkdir(parents=True, exist_ok=True)
            tmp = out.with_suffix(f".{os.getpid()}.tmp")
            cmd = [os.environ.get("CXX", "g++"), *FLAGS, f"-I{base / 'include'}", f"-I{NATIVE}",
                   *map(str, sources()), f"-L{libdir}", "-ldnnl", f"-Wl,-rpath,{libdir}",
                   "-o", str(tmp)]
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode:
                raise RuntimeError("building the oneDNN shim failed:\n" + " ".join(cmd) + "\n"
                                   + done.stderr[-2000:])
            os.replace(tmp, out)  # atomic: parallel builders see all or nothing
        _built[key] = out
        return out


def available() -> bool:
    try:
        return shim() is not None
    except RuntimeError:
        return False


_handle = []


def _lib():
    if not _handle:
        lib = ctypes.CDLL(str(shim()))
        for desc, (_, fn) in C_TYPES.items():
            getattr(lib, fn).argtypes = [ctypes.POINTER(desc), ctypes.c_char_p, ctypes.c_int]
        lib.wb_dnnl_context_new.restype = ctypes.c_void_p
        lib.wb_dnnl_context_free.argtypes = [ctypes.c_void_p]
        lib.wb_dnnl_conv.argtypes = [ctypes.c_void_p, ctypes.POINTER(ConvDesc)] + [
            ctypes.c_void_p] * 5
        lib.wb_dnnl_matmul.argtypes = [ctypes.c_void_p, ctypes.POINTER(MatMulDesc)] + [
            ctypes.c_void_p] * 4
        _handle.append(lib)
    return _handle[0]


_checked = {}  # (descriptor type, its bytes) -> answer: asked per find and per figure


def check(desc):
    """(True, oneDNN's kernel name) or (False, why oneDNN refuses) for a ConvDesc, PoolDesc
    or MatMulDesc.

    The name ends in " +reorder src" / " +reorder dst" when the kernel needs the data in
    another layout than the caller's, which the shim then reorders around each call."""
    key = (type(desc).__name__, ctypes.string_at(ctypes.addressof(desc), ctypes.sizeof(desc)))
    if key not in _checked:
        info = ctypes.create_string_buffer(512)
        fn = getattr(_lib(), C_TYPES[type(desc)][1])
        rc = fn(ctypes.byref(desc), info, len(info))
        _checked[key] = rc == 0, info.value.decode(errors="replace")
    return _checked[key]


def set_size(desc, field: str, value, index: int = None) -> None:
    """``desc.field`` (or ``desc.field[index]``) = ``value``, a size that may be a symbolic
    expression: the descriptor holds it at a probe size and remembers the expression,
    which the generated call evaluates on each call (``c_assignments``)."""
    if not hasattr(desc, "symbolic"):
        desc.symbolic = {}   # (field, index or None) -> expression
    desc.symbolic.pop((field, index), None)
    try:
        number = int(value)
    except TypeError:
        from workbench.analysis.sizes import number_or_typical
        number = number_or_typical(value)
        desc.symbolic[(field, index)] = value
    if index is None:
        setattr(desc, field, number)
    else:
        getattr(desc, field)[index] = number


def size_of_field(desc, field: str):
    """``desc.field`` as ``set_size`` was given it: an int or a symbolic expression."""
    return getattr(desc, "symbolic", {}).get((field, None), getattr(desc, field))


def c_assignments(desc, name: str) -> str:
    """C statements setting ``name``'s symbolic fields from the program's symbols."""
    from workbench.ops.symbolic_sizes import cpp_size
    c_names = {"in_": "in"}   # ``in`` is a Python keyword: ctypes' field is ``in_``
    return "".join(f"{name}.{c_names.get(field, field)}"
                   f"{'' if index is None else f'[{index}]'} = {cpp_size(value)};\n"
                   for (field, index), value in getattr(desc, "symbolic", {}).items())


def c_initializer(desc) -> str:
    """A shim descriptor as a C initializer, in its fields' order."""
    def value(v):
        if isinstance(v, float):
            return f"{v!r}f"
        if isinstance(v, ctypes.Array):
            return "{" + ", ".join(value(x) for x in v) + "}"
        return str(v)
    return "{" + ", ".join(value(getattr(desc, name)) for name, _ in desc._fields_) + "}"


@dace.library.environment
class WorkbenchOneDNN:
    """The shim and oneDNN, for tasklets that call wb_dnnl_* (one context per program)."""
    cmake_minimum_version = None
    cmake_packages = []
    cmake_variables = {}
    cmake_compile_flags = []
    cmake_link_flags = []
    cmake_files = []
    headers = ["wb_dnnl.h"]
    state_fields = ["void* wb_dnnl;"]
    init_code = "__state->wb_dnnl = wb_dnnl_context_new();"
    finalize_code = "wb_dnnl_context_free(__state->wb_dnnl);"
    dependencies = []

    @staticmethod
    def cmake_includes():
        return [str(NATIVE)]

    @staticmethod
    def cmake_libraries():
        lib = shim()
        return [str(lib)] if lib else []
