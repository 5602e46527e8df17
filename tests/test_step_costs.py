"""``app.py bench MODEL --interactive``: every action timed on a real session and build."""
import json

from workbench.cli import main


def test_interactive_bench_times_every_action(capsys):
    assert main(["--quiet", "bench", "mlp", "--interactive", "--json"]) == 0
    out = capsys.readouterr().out
    costs = json.loads(out.strip().splitlines()[-1])
    assert costs["model"] == "mlp" and costs["nodes"] == 5
    assert costs["matches"] > 0 and costs["selection_matches"] > 0
    assert costs["applied"] and costs["rebuild_step"] and costs["auto_steps"] > 0
    for key in ("open_s", "list_s", "list_selection_s", "apply_s", "undo_s", "redo_s", "auto_s",
                "build_cold_s", "rebuild_s"):
        assert costs[key] > 0, key
    assert costs["build_phases"]["compile"] > 0 and costs["rebuild_phases"]["compile"] > 0
    assert "rebuild after one step" in out and "cold build" in out


def test_interactive_bench_takes_a_recipe_file(tmp_path, capsys):
    recipe = tmp_path / "nothing.json"
    recipe.write_text(json.dumps({"name": "nothing", "steps": []}))
    assert main(["--quiet", "bench", "mlp", "--interactive", "--recipe", str(recipe),
                 "--json"]) == 0
    costs = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert costs["auto_steps"] == 0 and costs["build_cold_s"] > 0
