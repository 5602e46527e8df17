"""The ONNX backend node suite, run through ``workbench.backend``.

``suite.node_cases()`` lists the cases with the op type each one tests,
``worker`` runs a list of cases with the official runner in a subprocess,
``runner.run_suite`` shards cases over workers, survives crashes and hangs,
and ``report`` turns results into the per-op table and the totals.
"""
