"""The transformation panel's rows: which level a transformation is shown under, how a
level's matches are grouped and ordered, and reading the rows back (tests, screenshots)."""
from PyQt5.QtCore import Qt

LEVELS = ("local", "fusion", "layout", "global")


def level_of(name: str) -> str:
    from workbench import transformation_api as transform
    try:
        return transform.get(name).level
    except Exception:
        return "local"


NO_CHANGE = "No change"   # the group of matches predicted to move the same bytes
GROUP = Qt.UserRole + 1     # a group row's key: its transformation, or NO_CHANGE


def group_key(item) -> str:
    return item.data(0, GROUP) or item.text(0).split(" ")[0]


def match_items(tree) -> list:
    """The rows of a level's tree that hold a match (children of the groups)."""
    return [tree.topLevelItem(i).child(j) for i in range(tree.topLevelItemCount())
            for j in range(tree.topLevelItem(i).childCount())]


def arrange(found: list) -> list:
    """[(group key, matches)] in the order shown: predicted savings first (each
    transformation's rows by their change, its group where its best row is),
    rows still waiting for a prediction after them, then NO_CHANGE."""
    def key(m):
        return (m.delta_bytes is None, m.delta_bytes or 0)
    changing = sorted((m for m in found if m.delta_bytes != 0), key=key)
    groups = {}
    for m in changing:
        groups.setdefault(m.transformation, []).append(m)
    out = list(groups.items())
    unchanged = [m for m in found if m.delta_bytes == 0]
    if unchanged:
        out.append((NO_CHANGE, unchanged))
    return out
