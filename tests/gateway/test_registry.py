"""QueryRegistry: add/get/remove, never-reused generated names, persistence and errors."""
import pytest

from raycep.cep.errors import CepError, QueryValidationError
from raycep.gateway.server.registry import QueryRecord, QueryRegistry

TEXT = "PATTERN SEQ(A a, B b) WITHIN 10 s"


def test_add_get_all_remove_in_memory():
    reg = QueryRegistry()
    first = reg.add("rise", TEXT, {"key": "symbol"})
    second = reg.add(None, TEXT)
    assert isinstance(first, QueryRecord)
    assert first.id == "rise" and first.params == {"key": "symbol"} and first.created > 0
    assert second.id == f"q{second.seq}" and second.seq > first.seq and second.params == {}
    assert reg.get("rise") == first
    assert reg.get("missing") is None
    assert [r.id for r in reg.all()] == ["rise", second.id]
    assert reg.remove("rise") is True
    assert reg.remove("rise") is False
    assert reg.get("rise") is None
    assert [r.id for r in reg.all()] == [second.id]
    reg.close()


def test_memory_path_alias():
    reg = QueryRegistry(":memory:")
    reg.add("a", TEXT)
    assert [r.id for r in reg.all()] == ["a"]


def test_generated_ids_are_never_reused_after_removal():
    reg = QueryRegistry()
    a = reg.add(None, TEXT)
    b = reg.add(None, TEXT)
    reg.remove(a.id)
    reg.remove(b.id)
    c = reg.add(None, TEXT)
    assert c.id not in {a.id, b.id} and c.seq > b.seq


def test_generated_id_skips_a_user_chosen_q_name():
    reg = QueryRegistry()
    reg.add("q2", TEXT)  # takes seq 1, and the name a generator would produce for seq 2
    generated = reg.add(None, TEXT)
    assert generated.id != "q2"
    assert {r.id for r in reg.all()} == {"q2", generated.id}


def test_persists_across_reopen_and_counter_survives(tmp_path):
    path = tmp_path / "nested" / "dir" / "registry.db"
    reg = QueryRegistry(str(path))
    reg.add("rise", TEXT, {"within": 10, "nested": {"x": [1, 2]}})
    gone = reg.add(None, TEXT)
    reg.remove(gone.id)
    reg.close()
    assert path.exists()

    reg = QueryRegistry(str(path))
    records = reg.all()
    assert [r.id for r in records] == ["rise"]
    assert records[0].text == TEXT and records[0].params == {"within": 10, "nested": {"x": [1, 2]}}
    fresh = reg.add(None, TEXT)
    assert fresh.id != gone.id and fresh.seq > gone.seq
    reg.close()


def test_add_is_committed_without_close(tmp_path):
    path = str(tmp_path / "registry.db")
    writer = QueryRegistry(path)
    writer.add("durable", TEXT)
    # a second connection sees the query while the first one is still open (no close/commit)
    reader = QueryRegistry(path)
    assert reader.get("durable") is not None
    reader.close()
    writer.close()


def test_duplicate_id_raises_validation_error():
    reg = QueryRegistry()
    reg.add("rise", TEXT)
    with pytest.raises(QueryValidationError, match="already registered") as info:
        reg.add("rise", "other text")
    assert "'rise'" in str(info.value)
    assert reg.get("rise").text == TEXT
    assert len(reg.all()) == 1


@pytest.mark.parametrize("bad", ["", "has space", "x" * 65, "semi;colon", "ümlaut", 7])
def test_bad_id_raises_validation_error(bad):
    reg = QueryRegistry()
    with pytest.raises(QueryValidationError) as info:
        reg.add(bad, TEXT)
    assert repr(bad) in str(info.value)
    assert reg.all() == []


def test_good_ids_accepted():
    reg = QueryRegistry()
    for name in ["a", "x" * 64, "A-b_c.9"]:
        assert reg.add(name, TEXT).id == name


def test_params_not_json_raise_validation_error():
    reg = QueryRegistry()
    with pytest.raises(QueryValidationError, match="JSON"):
        reg.add("p", TEXT, {"obj": object()})
    assert reg.get("p") is None


def test_corrupt_file_raises_cep_error_naming_path(tmp_path):
    path = tmp_path / "registry.db"
    path.write_bytes(b"this is definitely not an sqlite database file\x00\xff" * 64)
    with pytest.raises(CepError) as info:
        QueryRegistry(str(path))
    assert str(path) in str(info.value)
    assert "not a database" in str(info.value)
