"""``python -m tcemu.mlip.distill._mtt ARGS``: metatrain's own command line (``mtt ARGS``), with tcemu's stub for
``hostlist`` (python-hostlist, which metatrain imports for SLURM only) registered when it is not installed."""

import sys

if __name__ == "__main__":
    from tcemu.mlip.models import _ensure_hostlist

    _ensure_hostlist()
    from metatrain.__main__ import main

    sys.argv[0] = "mtt"
    sys.exit(main())
