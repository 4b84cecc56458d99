"""Time a decoding command whose text output names each row change; print {"rows", "seconds"}.

The output goes through `grep -c` on the other core, so counting adds almost nothing to the
decoder's own time (mariadb-binlog -v writes one `### INSERT/UPDATE/DELETE` line per row).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time


def main(cmd: list[str]) -> None:
    pipeline = f"set -o pipefail; {shlex.join(cmd)} | grep -cE '^### (INSERT|UPDATE|DELETE)'"
    t0 = time.perf_counter()
    done = subprocess.run(["bash", "-c", pipeline], capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        sys.exit(done.returncode)
    print(json.dumps({"rows": int(done.stdout.strip()), "seconds": seconds}))


if __name__ == "__main__":
    main(sys.argv[1:])
