"""Every exit code of ``app.py`` and its JSON, run as a user runs it."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

ROOT = Path(__file__).resolve().parents[1]


def app(*args, cwd=None):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(ROOT / "app.py"), *args], capture_output=True,
                          text=True, cwd=cwd or ROOT, env=env, timeout=600)
    return proc


def last_json(proc):
    return json.loads(proc.stdout.strip().splitlines()[-1])


def assert_clean_error(proc, code, *needles):
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr
    err = proc.stderr.split("error: ", 1)[-1]
    for needle in needles:
        assert needle in err, err


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """y = relu(x @ W + b) with a weight initializer; small and quick to build."""
    rng = np.random.default_rng(3)
    w = helper.make_tensor("W", TensorProto.FLOAT, [8, 4], rng.standard_normal(32).tolist())
    b = helper.make_tensor("b", TensorProto.FLOAT, [4], rng.standard_normal(4).tolist())
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
             helper.make_node("Add", ["h", "b"], ["z"], name="add"),
             helper.make_node("Relu", ["z"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])], [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path = tmp_path_factory.mktemp("cli") / "tiny.onnx"
    onnx.save(model, path)
    return path


def test_info_json_bundled():
    proc = app("--quiet", "info", "mlp", "--json")
    assert proc.returncode == 0, proc.stderr
    info = last_json(proc)
    assert info["ops"] == {"Gemm": 3, "Relu": 2}
    assert info["parameters"] == 784 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 10 + 10
    assert info["flops"] > 2 * 64 * (784 * 1024 + 1024 * 1024 + 1024 * 10)
    assert info["tensors"] > 0


def test_verify_json_match(tiny_model):
    proc = app("verify", str(tiny_model), "--json")
    assert proc.returncode == 0, proc.stderr
    result = last_json(proc)
    assert result["match"] is True
    assert result["model"] == "tiny"
    assert result["build_s"] > 0
    (out,) = result["outputs"]
    assert out["name"] == "y" and out["max_abs_err"] < 1e-4
    # Progress lines on stderr name the phases as they go.
    assert "shape inference" in proc.stderr and "compile" in proc.stderr


def test_verify_inputs_and_expect(tiny_model, tmp_path):
    x = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    import onnxruntime as ort
    sess = ort.InferenceSession(str(tiny_model), providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, {"x": x})
    np.savez(tmp_path / "good.npz", y=y)
    np.savez(tmp_path / "bad.npz", y=y + 1.0)
    good = app("--quiet", "verify", str(tiny_model), "--inputs", str(tmp_path / "in.npz"),
               "--expect", str(tmp_path / "good.npz"), "--json")
    assert good.returncode == 0 and last_json(good)["match"] is True, good.stderr
    bad = app("--quiet", "verify", str(tiny_model), "--inputs", str(tmp_path / "in.npz"),
              "--expect", str(tmp_path / "bad.npz"), "--json")
    assert bad.returncode == 1
    result = last_json(bad)
    assert result["match"] is False and result["outputs"][0]["max_abs_err"] == pytest.approx(1, 1e-3)


def test_missing_file_exits_2(tmp_path):
    assert_clean_error(app("verify", str(tmp_path / "nope.onnx")), 2, "does not exist")


def test_not_onnx_exits_2(tmp_path):
    path = tmp_path / "junk.onnx"
    path.write_bytes(os.urandom(2000))
    assert_clean_error(app("info", str(path)), 2, "junk.onnx")


def test_checker_failure_exits_2(tmp_path):
    node = helper.make_node("Relu", ["x"], ["y"])
    graph = helper.make_graph([node, node], "dup", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    path = tmp_path / "dup.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    assert_clean_error(app("verify", str(path)), 2, "checker")


def test_unknown_name_exits_2():
    assert_clean_error(app("info", "resnet-9000"), 2, "bundled models are", "bert-layer")


def test_unsupported_ops_listed_at_once_exits_2(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="r"),
             helper.make_node("Mystery", ["a"], ["b"], name="hm1", domain="com.example"),
             helper.make_node("Mystery", ["b"], ["c"], name="hm2", domain="com.example"),
             helper.make_node("StringNormalizer", ["c"], ["y"], name="det")]
    graph = helper.make_graph(nodes, "uns", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])])
    path = tmp_path / "uns.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                      helper.make_opsetid("com.example", 1)]), path)
    proc = app("verify", str(path))
    assert_clean_error(proc, 2, "com.example::Mystery: hm1, hm2", "StringNormalizer: det")
    assert "compile" not in proc.stderr  # refused before anything was built


def test_bad_npz_exits_2(tiny_model, tmp_path):
    (tmp_path / "x.npz").write_text("not a zip")
    assert_clean_error(app("verify", str(tiny_model), "--inputs", str(tmp_path / "x.npz")), 2,
                       "npz")
    np.savez(tmp_path / "wrong.npz", q=np.zeros((3, 8), np.float32))
    assert_clean_error(app("verify", str(tiny_model), "--inputs", str(tmp_path / "wrong.npz")), 2,
                       "missing x", "unknown q")


def test_failed_build_exits_1(tiny_model):
    env_backup = os.environ.get("WORKBENCH_BLAS")
    os.environ["WORKBENCH_BLAS"] = "NoSuchBLAS"
    try:
        proc = app("verify", str(tiny_model))
    finally:
        if env_backup is None:
            del os.environ["WORKBENCH_BLAS"]
        else:
            os.environ["WORKBENCH_BLAS"] = env_backup
    assert_clean_error(proc, 1, "NoSuchBLAS")
    assert "internal error" not in proc.stderr


def test_bad_shape_option_exits_2(tiny_model):
    assert_clean_error(app("info", str(tiny_model), "--shape", "x=a,b"), 2, "--shape")
