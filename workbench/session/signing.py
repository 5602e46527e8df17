"""Telling SDFG files this workbench wrote from any others.

An SDFG file is a program: loading one evaluates its symbolic expressions
with Python (DaCe parses them with sympy, which calls ``eval``), and
building it compiles and runs the C++ in its tasklets. So the workbench
loads only SDFGs it wrote itself, unless the user accepts a file.

Rules:
1. A key of 32 random bytes lives in ``<cache>/signing-key`` (mode 0600;
   ``$WORKBENCH_CACHE``, default ``~/.cache/dace-workbench``), made on
   first use; when two processes race, the first one written wins.
2. Each SDFG this workbench writes into a session folder is signed:
   HMAC-SHA256(key, SDFG JSON text), kept in the folder's manifest. Only
   this user's workbench can make a signature that matches: a file from
   someone else, or one edited since, does not match.
3. Opening checks every signature before any SDFG is parsed; a missing or
   wrong one is an ``UntrustedSDFGError`` unless the caller trusts the
   folder (``trust=True``, ``--trust``, the GUI's dialog). A folder accepted
   that way is signed anew, so it is not asked about again.
4. Deleting the key (or the cache folder) makes earlier folders ask once.
"""
import contextlib
import contextvars
import hashlib
import hmac
import os
import secrets
import tempfile
from pathlib import Path

KEY_FILE = "signing-key"

_trust_default = contextvars.ContextVar("workbench_trust", default=False)
_keys = {}   # key path -> bytes (read once per process)


def _key() -> bytes:
    from workbench.build.settings import cache_dir
    path = cache_dir() / KEY_FILE
    key = _keys.get(path)
    if key is None:
        key = _read_or_make(path)
        _keys[path] = key
    return key


def _read_or_make(path: Path) -> bytes:
    if not path.is_file():
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(secrets.token_bytes(32))
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o600)
            try:
                os.link(tmp, path)   # fails when another process was first: use its key
            except FileExistsError:
                pass
            except OSError:          # a file system without hard links
                if not path.exists():
                    os.replace(tmp, path)
        finally:
            Path(tmp).unlink(missing_ok=True)
    key = path.read_bytes()
    if len(key) != 32:
        raise OSError(f"the signing key {path} is damaged ({len(key)} bytes); delete it (session "
                      f"folders written so far will then ask to be trusted once)")
    return key


def sign(sdfg_json: str) -> str:
    """This user's signature of an SDFG's JSON text."""
    return hmac.new(_key(), sdfg_json.encode(), hashlib.sha256).hexdigest()


def signed_here(sdfg_json: str, signature) -> bool:
    """Whether ``signature`` is this user's signature of ``sdfg_json``."""
    return isinstance(signature, str) and hmac.compare_digest(sign(sdfg_json), signature)


def trust_by_default() -> bool:
    """What ``trust=None`` means here: False, unless inside ``trusting(True)``."""
    return _trust_default.get()


@contextlib.contextmanager
def trusting(accept: bool = True):
    """Within the block, opening untrusted SDFG files is accepted (the CLI's ``--trust``)."""
    token = _trust_default.set(bool(accept))
    try:
        yield
    finally:
        _trust_default.reset(token)


def add_trust_arg(parser) -> None:
    """The CLI's ``--trust`` flag (verify, info, optimize, bench)."""
    parser.add_argument("--trust", action="store_true",
                        help="accept a session folder this workbench did not write: loading its "
                             "SDFGs evaluates their expressions with Python and building them "
                             "compiles and runs the C++ in their tasklets")
