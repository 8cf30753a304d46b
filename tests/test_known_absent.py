"""``OutputGuard.known_absent`` lets a bucket skip the existence listing before creating a node
(#39). It may say "absent" only in a root that held no data when the run checked it, and never for
a node the run created, one under it or one above it, also after the plan was committed."""
from zarrmill.io.storage.guard import open_guard


def test_known_absent_only_for_nodes_nobody_made(tmp_path):
    guard = open_guard(tmp_path / "out.zarr", [])
    guard.claim("s")
    root = guard.root
    assert guard.known_absent(root / "A" / "1")
    guard.make_dirs(root / "A" / "1" / "0")
    guard.will_create(root / "B", absent=True)
    for made in ("A", "A/1", "A/1/0", "B"):
        assert not guard.known_absent(root / made), made
    assert guard.known_absent(root / "A" / "2") and guard.known_absent(root / "C")
    guard.commit()  # the plan's nodes stay: still not absent
    assert not guard.known_absent(root / "A" / "1" / "0") and not guard.known_absent(root / "B")


def test_a_root_with_data_is_never_known_empty(tmp_path):
    first = open_guard(tmp_path / "out.zarr", [])
    first.claim("s")
    first.make_dirs(first.root / "A")
    (first.root / "A" / "data").write_text("x")
    first.commit()
    again = open_guard(tmp_path / "out.zarr", [])
    again.claim("s")
    assert not again.known_absent(again.root / "Z")
