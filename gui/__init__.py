"""The desktop workbench: a Qt view over a ``workbench.Session``.

The window keeps no model state of its own. Every action calls a Session
method through ``gui.controller.Controller``, which runs the call in a
worker thread (``gui.worker``) and tells the panels when it is done. Imports
run ``app.py -> gui -> workbench``, never back.

Modules, one per part of the window: ``graph_model`` (SDFG -> drawable
description), ``layout`` (Graphviz dot, grandalf or a built-in fallback),
``graph_items``/``graph_view``/``graph_scene`` (the SDFG canvas),
``transform_panel``, ``history_panel``, ``profile_panel``,
``properties_panel``, ``code_panel``, ``main_window`` (its File side:
``file_actions``); the controller's build, verify and profile calls are
``program_runs``; ``cli_gui``/``cli_screenshot`` are the ``gui`` and
``screenshot`` commands.
"""
