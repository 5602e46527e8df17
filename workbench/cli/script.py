"""What a script written by ``Session.save_script`` does when run: replay, verify,
and turn errors into the CLI's exit codes (2 bad input, 1 failed check)."""
from workbench.cli.common import report_error


def run_script(replay, argv) -> int:
    try:
        ws = replay(*argv[:1])
        report = ws.verify()
    except Exception as e:  # noqa: BLE001 (a script's last line of defence, as the CLI's)
        return report_error(e)
    print(report.text())
    return 0 if report.match else 1
