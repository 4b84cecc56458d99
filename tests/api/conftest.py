"""API fixtures: an app over a typed status double, served in-process by TestClient."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from apihelpers import TOKEN, StatusDouble

with warnings.catch_warnings():
    # starlette 1.10 asks for `httpx2` instead of `httpx`; either works for TestClient.
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from api.main import create_app
from service.settings import Settings


@pytest.fixture
def double() -> StatusDouble:
    return StatusDouble()


@pytest.fixture
def make_client(double: StatusDouble) -> Iterator[Callable[..., TestClient]]:
    clients: list[TestClient] = []

    def make(**settings: Any) -> TestClient:
        client = TestClient(create_app(Settings(**settings), double))
        client.__enter__()
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.__exit__(None, None, None)


@pytest.fixture
def client(make_client: Callable[..., TestClient]) -> TestClient:
    return make_client()


@pytest.fixture
def authed(make_client: Callable[..., TestClient]) -> TestClient:
    c = make_client(api_token=TOKEN)
    c.headers["Authorization"] = f"Bearer {TOKEN}"
    return c
