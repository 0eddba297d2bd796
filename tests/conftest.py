"""Shared pytest fixtures."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def s3_server():
    """One loopback SeaweedFS S3 server for the session, with bucket `mfargo-test`.

    Tests share it, so each should write under its own unique key prefix.
    """
    from mfargo.runner.s3server import S3Server

    with S3Server.start() as server:
        server.create_bucket("mfargo-test")
        yield server
