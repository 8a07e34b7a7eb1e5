"""The denv conformance suite: what any denv (control plane + hosts) must do for frameworks.

Run it against a control plane with a deployed project::

    pytest --pyargs denv.conformance --denv-url URL --denv-token TOKEN --denv-project quickstart

(or set ``DENV_URL``, ``DENV_TOKEN``, ``DENV_PROJECT``). Each test gets the session's
sandbox (a fork of the project's current version) through the ``denv_sandbox`` fixture,
defined in :mod:`denv.conformance.plugin`; override that fixture in a ``conftest.py`` to
run the suite against an environment of your own.
"""

from ._support import DenvSandbox

__all__ = ["DenvSandbox"]
