"""The production stack on this machine (a package, so its conftest is ``stack.conftest``
and does not shadow the suite's ``conftest`` module that tests import helpers from)."""
