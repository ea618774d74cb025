"""``python -m bench [options]``: the router comparison (:mod:`bench.runner`);
``python -m bench micro [options]``: in-process measurements (:mod:`bench.micro`).

``micro --rwrouter-ref REF`` runs the measurements against ``src/rwrouter`` of git ``REF``
(exported with ``git archive`` to a temporary directory, put first on PYTHONPATH, in a child
process), like the runner's own ``--rwrouter-ref``.
"""

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def _micro(argv: list[str]) -> int:
    """Run micro, in a child process on an exported ref when ``--rwrouter-ref`` is given."""
    if "--rwrouter-ref" in argv:
        i = argv.index("--rwrouter-ref")
        if i + 1 >= len(argv):
            print("--rwrouter-ref needs a git ref", file=sys.stderr)
            return 2
        ref, rest = argv[i + 1], argv[:i] + argv[i + 2 :]
        from bench.contenders import export_rwrouter

        tmp = Path(tempfile.mkdtemp(prefix="rwrouter-bench-micro-"))
        try:
            env = export_rwrouter(ref, tmp)
            print(f"rwrouter from git ref {ref}", flush=True)
            cmd = [sys.executable, "-m", "bench", "micro", *rest]
            return subprocess.run(cmd, env=env, check=False).returncode
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    from bench.micro import main as micro_main

    return micro_main(argv)


if __name__ == "__main__":
    if sys.argv[1:2] == ["micro"]:
        sys.exit(_micro(sys.argv[2:]))
    from bench.runner import main

    sys.exit(main(sys.argv[1:]))
