"""A compiled program called in this process rather than in a worker: DaCe
initializes a program once, on its first call, so one whose initialization
allocates buffers sized by its symbols must start again when the sizes change."""


def initialized_for(build, args: dict) -> None:
    """Before ``build``'s program runs in this process on ``args``: a program whose
    initialization allocates buffers sized by its symbols (``init_sized``) and that was
    initialized at other sizes is finalized, so that its next call initializes it at
    these (DaCe initializes a compiled program once, on its first call)."""
    from workbench.analysis.memory import init_sized
    compiled = build.compiled
    names = sorted(getattr(compiled, "_free_symbols", ()) or ())
    sizes = tuple((n, int(args[n])) for n in names if n in args)
    if not sizes or not init_sized(build.sdfg):
        return
    if getattr(compiled, "_initialized", False) and \
            getattr(compiled, "_workbench_sizes", sizes) != sizes:
        compiled.finalize()
    compiled._workbench_sizes = sizes
