"""A seeded fuzzer for the model importer and the CLI.

``python -m tests.fuzz --count 500`` writes broken versions of the bundled
models (mutations.py) and runs ``app.py info`` and ``verify`` on each
(runner.py): every run must end with exit 1 or 2 and one error paragraph,
or succeed on a model the mutation left valid.
"""
