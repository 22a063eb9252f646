"""``python -m cuframes ls|stat|clean|snapshot``: the operator tool's commands from Python.

The same code, options and output as the ``cuframes`` binary (``cuframes --help``); the
exporter is served by the binary only.
"""

import sys

from ._cuframes import _tool_main


def main() -> int:
    try:
        return _tool_main(sys.argv[1:])
    except KeyboardInterrupt:
        # Ctrl-C ends `stat --watch` (and any wait): the status a shell gives for SIGINT.
        return 130
    except BrokenPipeError:
        # The reader went away (`| head`): nothing more to say, and nowhere to say it.
        sys.stdout = None
        return 1


if __name__ == "__main__":
    sys.exit(main())
