"""The operations of an OpenAPI schema for the HTTP fuzz tests: every one loaded, or the test fails."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from schemathesis.schemas import APIOperation, BaseSchema


def loaded_operations(schema: BaseSchema) -> list[APIOperation[Any, Any, Any, Any]]:
    """Each operation of ``schema``; one that does not load fails the test, naming why."""
    # imported here, as the tests import schemathesis: only when they run
    from schemathesis.core.result import Err

    found = []
    for result in schema.get_all_operations():
        if isinstance(result, Err):
            raise AssertionError(f"an operation of the API's schema does not load: {result.err()}")
        found.append(result.ok())
    return found
