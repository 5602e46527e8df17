"""The training program in the window's terms: backward operators grouped in a
'backward' scope under the forward scope they belong to, coloured apart."""
import pytest

import workbench
from gui import graph_model, scope_groups
from workbench.training.naming import training_role


@pytest.fixture(scope="module")
def resnet_training():
    return workbench.open("zoo:resnet").training(loss="cross_entropy", optimizer="sgd")


def test_backward_operators_group_under_their_forward_scope(resnet_training):
    desc = graph_model.describe(resnet_training.sdfg)
    groups = scope_groups.build_groups(desc)
    backward = [p for p in groups if p[-1] == "backward"]
    # every convolution of the export has its backward group inside its own scope
    conv_scopes = {scope_groups.scope_path(n.subtitle) for n in desc.nodes.values()
                   if n.kind == "onnx" and n.title == "Conv" and "backward" not in n.subtitle}
    assert conv_scopes and all(s + ("backward",) in groups for s in conv_scopes)
    for path in backward:
        assert groups[path].parent == path[:-1] or groups[path].parent is None
    assert ("loss",) in groups and ("optimizer",) in groups


def test_roles_and_colours(resnet_training):
    from gui.graph_items import FILL, ROLE_FILL, default_fill
    desc = graph_model.describe(resnet_training.sdfg)
    roles = {}
    for n in desc.nodes.values():
        if n.kind == "onnx":
            roles.setdefault(training_role(n.subtitle), n)
    assert set(roles) == {"forward", "loss", "backward", "update"}
    assert default_fill(roles["forward"]) == FILL["onnx"]
    for role in ("backward", "loss", "update"):
        assert default_fill(roles[role]) == ROLE_FILL[role]
