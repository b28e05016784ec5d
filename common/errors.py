"""User-facing errors: one clear line naming the fix, and a non-zero exit.

Stages raise UserError for anything a user can cause (missing file, wrong key, corrupt
line, no index built yet). `cli_main` turns it into `error: <message>` on stderr and exit 2,
so a traceback only ever means a bug in the project.
"""
import sys
from typing import Callable


class UserError(Exception):
    """An error the user can fix; the message says how."""


def cli_main(main: Callable[[], object]) -> None:
    try:
        main()
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
