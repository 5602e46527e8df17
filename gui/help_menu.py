"""The Help menu: keyboard shortcuts, where the session lives, the README's sections.

Each item opens a read-only text window (not modal: the workbench goes on).
The shortcuts are read from the window's own actions, and the README is the
project's README.md split at its ``##`` headings, so neither can go stale.
"""
import html
from pathlib import Path

from PyQt5.QtCore import QUrl
from PyQt5.QtGui import QDesktopServices
from PyQt5.QtWidgets import QDialog, QDialogButtonBox, QTextBrowser, QVBoxLayout

from gui import sessions

README = Path(__file__).resolve().parents[1] / "README.md"
# the graph view's own keys and mouse gestures (gui.graph_canvas.GraphCanvas handles them;
# they are not window actions, so they are listed here)
GRAPH_GESTURES = [("Zoom in / out (graph)", "+ / −, mouse wheel"),
                  ("Fit the selection, else the graph at a readable scale (graph focused)",
                   "F"),
                  ("Next / previous Find hit", "F3 / Shift+F3"),
                  ("Open a folded name-scope box / fold an open group", "double-click it / "
                   "its frame"),
                  ("Fold all groups to a depth, export the graph (SVG, PNG)",
                   "right-click the graph"),
                  ("Move the view", "click or drag in the overview (bottom right)"),
                  ("Pan the graph", "middle drag, Alt+drag"),
                  ("Select nodes", "click, rubber band"),
                  ("Expand a nested SDFG", "double-click it"),
                  ("Apply a match", "double-click its row")]


def readme_sections(path: Path = README) -> list:
    """[(heading, markdown)] of the README's ``##`` sections, in order ([] without one)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return []
    out, fence = [], False
    for line in text.splitlines():
        fence = fence != line.startswith("```")
        if line.startswith("## ") and not fence:
            out.append([line[3:].strip(), [line]])
        elif out:
            out[-1][1].append(line)
    return [(title, "\n".join(lines).strip() + "\n") for title, lines in out]


def shortcut_rows(window) -> list:
    """[(action, shortcuts)] of every window action that has a shortcut."""
    rows = []
    for action in window.actions():
        keys = [k.toString() for k in action.shortcuts() if not k.isEmpty()]
        if keys:
            rows.append((action.text().replace("&&", "\0").replace("&", "").replace("\0", "&"),
                         ", ".join(keys)))
    return rows


def session_text(ws) -> str:
    """Where the window's session lives, as HTML."""
    if ws is None:
        return "<p>No model is open.</p>"
    if ws.folder is None:
        return (f"<p>The session of <b>{html.escape(ws.name)}</b> has no session folder; "
                f"<i>File › Save Session</i> (Ctrl+S) makes one under "
                f"<code>{html.escape(str(sessions.root()))}</code>.</p>")
    state = ("written" if sessions.written(ws.folder) else
             "reserved; it is written at the first step or with Ctrl+S")
    return (f"<p>The session of <b>{html.escape(ws.name)}</b> lives in</p>"
            f"<p><code>{html.escape(str(ws.folder))}</code> ({state}).</p>"
            f"<p>It is saved after every step, undo and redo, so closing the window loses "
            f"nothing; <i>File › Open Recent</i> reopens it. <i>File › Save Session As</i> "
            f"moves it to a folder you choose; Ctrl+S saves now. New sessions go under "
            f"<code>{html.escape(str(sessions.root()))}</code> "
            f"(<code>$WORKBENCH_SESSIONS</code> to change that).</p>")


class HelpMenu:
    def __init__(self, window, menu):
        self.window, self.menu = window, menu
        self.dialog = None     # the text window last opened
        self.browser = None    # its QTextBrowser
        window._action(menu, "&Keyboard Shortcuts", self.show_shortcuts)
        window._action(menu, "&Where Is This Session?", self.show_session)
        readme = menu.addMenu("&README")
        for title, text in readme_sections():
            window._action(readme, title, lambda t=title, m=text: self.show_text(t, m, True))
        readme.setEnabled(bool(readme.actions()))

    def show_shortcuts(self):
        rows = "".join(f"<tr><td>{html.escape(name)}</td><td>&nbsp;&nbsp;<b>{html.escape(keys)}"
                       f"</b></td></tr>" for name, keys in shortcut_rows(self.window)
                       + GRAPH_GESTURES)
        self.show_text("Keyboard shortcuts", f"<table>{rows}</table>")

    def show_session(self):
        self.show_text("Where is this session?", session_text(self.window.ctl.ws))
        ws = self.window.ctl.ws
        if ws is not None and sessions.written(ws.folder):
            folder = str(ws.folder)
            button = self.buttons.addButton("Open Folder", QDialogButtonBox.ActionRole)
            button.clicked.connect(
                lambda: QDesktopServices.openUrl(QUrl.fromLocalFile(folder)))

    def show_text(self, title: str, text: str, markdown: bool = False):
        """A read-only text window (Markdown or HTML), replacing the previous one."""
        if self.dialog is not None:
            self.dialog.close()
        dialog = QDialog(self.window)
        dialog.setWindowTitle(title)
        browser = QTextBrowser()
        browser.setOpenExternalLinks(True)
        browser.setSearchPaths([str(README.parent)])   # the README's pictures
        if markdown:
            browser.setMarkdown(text)
        else:
            browser.setHtml(text)
        self.buttons = QDialogButtonBox(QDialogButtonBox.Close)
        self.buttons.rejected.connect(dialog.close)
        layout = QVBoxLayout(dialog)
        layout.addWidget(browser)
        layout.addWidget(self.buttons)
        dialog.resize(760, 560)
        dialog.show()
        self.dialog, self.browser = dialog, browser
        return dialog
