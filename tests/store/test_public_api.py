"""The store's public names are a contract other layers code against."""

import sagacity.store


def test_store_exports() -> None:
    assert sagacity.store.__all__ == [
        "ApprovalRequest",
        "ApprovalStore",
        "JournalRights",
        "JournalStore",
        "Pool",
        "SagaSummary",
        "apply_grants",
        "input_hash",
        "journal_rights",
        "migrate",
        "open_pool",
        "provision",
    ]
    assert all(hasattr(sagacity.store, name) for name in sagacity.store.__all__)
