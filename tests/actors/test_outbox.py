"""actors.outbox: records with their queries and identities, acknowledged and paged in any
pieces, against a plain list of (record, query, identity)."""
from hypothesis import given, settings
from hypothesis import strategies as st

from raycep.actors.outbox import Outbox

ops = st.lists(st.one_of(
    st.tuples(st.just("extend"), st.integers(0, 6), st.booleans(), st.booleans()),
    st.tuples(st.just("forget"), st.integers(0, 9)),
    st.tuples(st.just("page"), st.integers(0, 12))), max_size=40)


@settings(max_examples=300, deadline=None)
@given(ops=ops, restored=st.integers(0, 3))
def test_outbox_pages_what_a_list_of_triples_would(ops, restored):
    made = 0

    def records(n):
        nonlocal made
        made += n
        return [b"r%d" % k for k in range(made - n, made)]

    first = records(restored)
    box, model = Outbox(first), [(r, None, None) for r in first]
    for op in ops:
        if op[0] == "extend":
            _, n, known, some = op
            recs = records(n)
            if known:
                queries = [f"q{k % 3}" if some or k % 2 else None for k in range(n)]
                idents = [None if q is None else r.decode() for q, r in zip(queries, recs)]
                box.extend(recs, queries, idents)
                model += list(zip(recs, queries, idents))
            else:
                box.extend(recs)
                model += [(r, None, None) for r in recs]
        elif op[0] == "forget":
            box.forget(op[1])
            del model[:op[1]]
        else:
            got = box.page(op[1])
            want = model[:op[1]]
            assert got == tuple(list(x) for x in zip(*want)) if want else got == ([], [], [])
        assert len(box) == len(model) and list(box) == [r for r, _, _ in model]
