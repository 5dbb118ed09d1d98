"""A request's copies (name#i): made by JobSpec.members, folded back by base_request and folded_request."""

from detrun.record.keys import base_request, copy_name, folded_request


def test_request_copies_fold_to_their_base():
    assert copy_name("long", 3) == "long#3"
    assert [base_request(n) for n in ("long#3", "long#*", "long")] == ["long"] * 3
    assert [folded_request(n) for n in ("long#3", "long")] == ["long#*", "long"]
