"""Build step for single-file solutions: execute the file so that its ``load_inline`` compiles.

Run as ``python -m cuda_agent.sandbox.inline_build FILE`` by :mod:`.build`, in its own process
with ``TORCH_EXTENSIONS_DIR`` pointing into the build cache. The worker that later runs the
candidate imports the same file and finds the extension already built. Compiler errors are
printed (torch raises them with the compiler output), and the exit code is non-zero.
"""

import runpy
import sys
import traceback


def main() -> int:
    path = sys.argv[1]
    try:
        runpy.run_path(path, run_name="model_new")
    except BaseException as e:  # noqa: BLE001 - anything the candidate raises is a build failure
        if isinstance(e, SystemExit) and e.code in (0, None):
            return 0
        text = traceback.format_exc()
        cause = getattr(e, "__cause__", None)
        if cause is not None and getattr(cause, "output", None):
            out = cause.output.decode(errors="replace") if isinstance(cause.output, bytes) else str(cause.output)
            text = out + "\n" + text
        print(text, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
