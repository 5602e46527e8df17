"""``verify --target gpu``: refused with exit 2 where no CUDA device is available,
a real run compared with onnxruntime where one is."""
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import workbench
from workbench.build.cuda.device import cuda_device_count
from workbench.errors import BadInputError, NoCudaDeviceError

ROOT = Path(__file__).resolve().parents[1]
HAS_DEVICE = cuda_device_count() > 0
needs_no_device = pytest.mark.skipif(HAS_DEVICE, reason="a CUDA device is present: the "
                                     "no-device path cannot be exercised here")


@needs_no_device
def test_cli_verify_gpu_without_device_exits_2_before_building():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, str(ROOT / "app.py"), "verify", "mlp", "--target",
                           "gpu", "--arch", "sm_80"], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    error = proc.stderr.split("error: ", 1)[1]
    assert "no CUDA device is available" in error
    assert "optimize MODEL --target gpu -o FOLDER" in error
    assert len(error.strip().splitlines()) == 1  # one paragraph
    assert "expand" not in proc.stderr  # refused before any build
    assert time.perf_counter() - t < 120


@needs_no_device
def test_session_verify_gpu_without_device_raises_and_builds_nothing():
    ws = workbench.open("mlp")
    with pytest.raises(NoCudaDeviceError) as info:
        ws.verify(target="gpu")
    assert info.value.exit_code == 2
    assert ws._build is None


def test_arch_only_with_gpu_target():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(ROOT / "app.py"), "verify", "mlp", "--arch",
                           "sm_90"], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 2 and "--arch applies to --target gpu only" in proc.stderr


@pytest.mark.skipif(not shutil.which("nvcc"), reason="nvcc is not installed")
def test_arch_names():
    from workbench.build.cuda import normalize_arch, nvcc
    assert [normalize_arch(a, nvcc()) for a in ("sm_90", "80", "compute_86")] == \
        ["90", "80", "86"]
    for bad in ("sm_20", "fast", "9"):
        with pytest.raises(BadInputError, match="sm_80"):
            normalize_arch(bad, nvcc())


@pytest.mark.skipif(not HAS_DEVICE, reason="no CUDA device: GPU programs are compiled "
                    "(tests/test_cuda_compile.py) but cannot run here")
@pytest.mark.parametrize("model", ["mlp", "mbconv"])
def test_verify_on_gpu_matches_onnxruntime(model):
    ws = workbench.open(model)
    report = ws.verify(target="gpu")
    assert report.match, report.text()
    assert ws._build.target == "gpu" and ws._build.arch
