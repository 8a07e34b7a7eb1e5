"""The client's target methods against a live control plane: the capability table, the local
hosts target `denv up` makes, and a target created, shown and removed; a credential its kind
does not take is refused (test_client.py checks that a credential's value never comes back)."""

from __future__ import annotations

import uuid

import pytest

import denv
from conftest import Live

pytestmark = pytest.mark.integration


def test_targets_live(live: Live) -> None:
    with denv.Client(live.url, live.token, live.project) as client:
        kinds = {k.kind: k for k in client.target_kinds()}
        assert kinds["hosts"].available and kinds["hosts"].family == "hosts"
        assert kinds["hosts"].capabilities["snapshot"] is True
        assert "local" in [t.name for t in client.list_targets()]
        name = f"py-{uuid.uuid4().hex[:6]}"
        with pytest.raises(denv.InvalidRequestError, match="'note' is not a credential of hosts"):
            client.create_target(name, "hosts", credentials={"note": "x"})
        made = client.create_target(name, "hosts")
        try:
            assert (made.name, made.kind, made.credentials) == (name, "hosts", [])
            shown = client.get_target(name)
            assert shown.capabilities == kinds["hosts"].capabilities
        finally:
            client.delete_target(name)
        assert name not in [t.name for t in client.list_targets()]
        with pytest.raises(denv.NotFoundError):
            client.get_target(name)
