"""``transforms``: the transformation library, by level."""
from workbench.cli.common import emit_json


def register(sub):
    p = sub.add_parser("transforms", help="list the transformation library by level")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=run)


def run(args, progress) -> int:
    from workbench import transformation_api as transform
    library = transform.by_level()
    if args.json:
        emit_json(library)
        return 0
    for level, entries in library.items():
        print(f"{level} ({len(entries)})")
        for e in entries:
            print(f"  {e['name']:<28} {e['description']}")
    return 0
