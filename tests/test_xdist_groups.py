"""The README's test command relies on pytest-xdist's loadgroup: tests/conftest.py marks the tests
that share a module- or session-scoped fixture with one xdist_group, and xdist sends a group to
one worker by a suffix it adds to each test's node id. pytest 9 keeps node ids where xdist 3.8
cannot add it: no group then reaches the scheduler, and every worker that gets one of a fixture's
tests builds the fixture again (the validation-accuracy suite twice, both times exclusive)."""

import os

import pytest


@pytest.fixture(scope="session")
def shared_probe() -> int:
    return os.getpid()


def test_a_shared_fixture_groups_its_tests_on_one_worker(shared_probe, request):
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.skip("runs under pytest-xdist (-n 2 --dist loadgroup)")
    if not request.config.getoption("loadgroup", False):  # xdist sets it on a worker for --dist loadgroup
        pytest.skip("checks --dist loadgroup")
    assert request.node.nodeid.endswith("@shared_probe"), request.node.nodeid
    assert shared_probe == os.getpid()
