"""``python -m wfctl``: the same as the ``wfctl`` command."""

from wfctl.cli.app import main

main()
