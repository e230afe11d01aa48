"""The ``flagstaff`` command: :mod:`~flagstaff.cli.main` parses and dispatches;
:mod:`~flagstaff.cli.transfer` draws flags import and export (planned by
:mod:`~flagstaff.application.flag_transfer`)."""
