"""The ``flagstaff`` command: :mod:`~flagstaff.cli.main` parses and dispatches;
:mod:`~flagstaff.cli.transfer` plans flags import and export."""
