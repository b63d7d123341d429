"""A shipped migration is never edited: a database records only the number of each
migration it applied, not its text (docs/deploy.md, "Upgrading, with migrations"), so an
edit would reach new databases and never the ones that already ran the file: two
schemas under one version. Each shipped file's SHA-256 is pinned here. A new
migration adds its line when it lands; a fix to a landed one is a new migration."""

from __future__ import annotations

import hashlib

from pgworkerd.storage.migrations import available

SHIPPED = {
    (1, "jobs"): "0f26cdff4b82c72d3d502458bda8bb41443212be5d57bdbbad20759756861d06",
    (2, "queues"): "89d8c9cb33d83a681b85c65af3f6b0a60774617488e8358c8d58c309dfdeca9c",
    (3, "periodic"): "d8149401dec45cd5d0d9bbd927fdbd171a4a2e63fdd918c38e8b617cb5a60a5e",
    (4, "progress"): "e975131f879ef46d70ad423bc40ef59a306178aacbad19b27e105901cc0ef95d",
    (5, "trace_context"): "61a11f028fd10236179d8aa5042c2d27e80b77790ace76ffec0bd7fdbb08bfbf",
    (6, "flow_control"): "a33a6349b5e4650e6a9dc36ae3cd89d3999a80f1e023973c66f3603a632e9ef1",
    (7, "limits"): "83dd2fbb60a82bb0285821323bcab1ef13814f64843893f04e5d64a0e7f0f099",
    (8, "uniqueness"): "b2f564ac29a296b0cfe2edaa9cb2b8e8c0f662d1c0350bd6c9e2d90bf31b2262",
    (9, "dashboard"): "e83d915cca9cd406422b655f436a1e23ea16739889af36c70f2ff9d53b8a9974",
    (10, "workflows"): "6dcd12e5ad6754ea9fe7251da57bc2cfb003c4927958b541ff9d00652a961b42",
    (11, "release_fast_path"): "f494e1ba9bc5d4b17070c65a149380cf7ad1cb51d2efd4d096784c70493a5afc",
    (12, "lean_checks"): "800dde78c7d69415b9ffe9aaaf0e7bd70af0824a78d83417a5466583f0f8b8fb",
    (13, "domain_checks"): "5ad37e308123b919c02151c936fa18e72802c33b5538669d6657db58d6501ce1",
    (
        14,
        "dead_or_waiting_index",
    ): "8610346eb0644f5c802a9506843e0f15dc72c923460232ff05fa120abc04b234",
    (15, "lifecycle_domain"): "af853331f745717e5412976d1ebde77104480481520da79ad7e49cb4bd2909cb",
    (16, "qualified_release"): "c080317e2bd4dd4227d4bda3fb33fa58e129ae602393b30ea48dac6981bd3f39",
    (
        17,
        "cancelled_holds_lease",
    ): "e8ad533b983d8df7598a223f794ee36abf077098dac0281cc35ff7ede47888e0",
    (18, "release_exact_types"): "f305cf3e6d37baa9cea6014ae3bde9bfc35920b7f7d543e2f6c0435b2be70ba5",
    (19, "release_in_id_order"): "7addab866112a216c99870bc585fcfb20f53e5667ecdd6870127c690b213459e",
    (20, "cascade_lock_order"): "09972f9e52c7d2a58b36729e1576f626a1f3bd2c776187d208e1bd0c4dddacef",
}


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_no_shipped_migration_was_edited() -> None:
    edited = [
        f"{m.version:04d}_{m.name}.sql"
        for m in available()
        if (m.version, m.name) in SHIPPED and _digest(m.sql_text) != SHIPPED[(m.version, m.name)]
    ]
    assert edited == [], f"shipped migrations edited (write a new migration instead): {edited}"


def test_no_shipped_migration_was_removed_or_renamed() -> None:
    present = {(m.version, m.name) for m in available()}
    assert sorted(set(SHIPPED) - present) == []


def test_every_migration_is_pinned() -> None:
    unpinned = {
        f"{m.version:04d}_{m.name}.sql": _digest(m.sql_text)
        for m in available()
        if (m.version, m.name) not in SHIPPED
    }
    assert unpinned == {}, f"add to SHIPPED when the migration lands: {unpinned}"
